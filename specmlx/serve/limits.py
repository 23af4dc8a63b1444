"""Who may call, from where, and how much: checks on a request before any of it is parsed.

`Access` says it; `guard` puts its checks in front of an app (the API key
itself is checked by the routes, which then know whose request it is).

Starlette reads a body whole and has no limit of its own. `BodyLimit` reads at
most `max_bytes` (refusing at once when Content-Length says more), then hands
the body on; later messages (a client's disconnect) pass straight through,
so a streaming handler still learns that its client left.

`LoopbackHost` refuses a request whose `Host` header is not this machine's
name, for a server that listens on loopback: a web page that rebinds its own
DNS name to 127.0.0.1 reaches the server from the user's browser, but its
requests still name the page's host.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import APIError


@dataclass(frozen=True)
class Access:
    """Who may call and from where.

    `api_keys`: none, anyone on the bound address; else a Bearer key among them, and each key's
    conversations are kept apart. `loopback`: the server listens on this machine only, so a
    `Host` header naming another (a DNS-rebinding web page) is refused. `cors_origins`: web
    pages that may call it from a browser."""

    api_keys: tuple[str, ...] = ()
    max_body_bytes: int = 4 << 20
    loopback: bool = True
    cors_origins: tuple[str, ...] = ()


def guard(app: FastAPI, access: Access) -> None:
    """The checks `access` asks for, in front of every route."""
    # The last added runs first: the Host check, then CORS (whose preflights carry no key), then the cap.
    app.add_middleware(BodyLimit, max_bytes=access.max_body_bytes)
    if access.cors_origins:
        # Any request header: browser SDKs add their own (X-Stainless-*); no cookies are ever allowed.
        app.add_middleware(CORSMiddleware, allow_origins=list(access.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["*"])
    if access.loopback:
        app.add_middleware(LoopbackHost)


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_big = APIError(413, f"the request body is larger than this server accepts ({self.max_bytes} bytes)",
                           "request_too_large")
        declared = dict(scope.get("headers", ())).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await too_big.response(scope["path"])(scope, receive, send)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left before sending it all
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                await too_big.response(scope["path"])(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay, send)


# Names no public web page can have: `.localhost`, `.internal` (reserved for private use; Docker
# Desktop's host.docker.internal reaches the Mac's loopback) and `.local` (this network's mDNS).
PRIVATE_SUFFIXES = (".localhost", ".internal", ".local")


def local_host(header: str) -> bool:
    """Whether a Host header (`name[:port]`, `[v6]:port`) names this machine."""
    name = header.rsplit("]", 1)[0].lstrip("[") if header.startswith("[") else header.rsplit(":", 1)[0]
    name = name.lower().rstrip(".")
    if not name or name == "localhost" or name == socket.gethostname().lower():  # no Host (HTTP/1.0): no browser's
        return True
    if name.endswith(PRIVATE_SUFFIXES):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class LoopbackHost:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = dict(scope.get("headers", ())).get(b"host", b"").decode("latin-1")
            if not local_host(host):
                refused = APIError(403, f"this server listens on this machine only, and the request names host "
                                        f"{host!r}: send it to 127.0.0.1 or localhost, or start the server with "
                                        "--host to reach it from elsewhere", "invalid_host")
                await refused.response(scope["path"])(scope, receive, send)
                return
        await self.app(scope, receive, send)
