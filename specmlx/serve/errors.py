"""Errors on the wire, in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`, and in
Anthropic's on its Messages routes (`/v1/messages...`): `{"type": "error", "error": {"type", "message"}}`.

Every way a request can fail ends here, so a client always gets one sentence
and a status, never a traceback, and no bad request stops the server. The shape
follows the request's path, so that the checks in front of every route (the API
key, the body cap) answer each client in its own.
"""

from __future__ import annotations

import json

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..log import user_error

TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
         405: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error",
         503: "server_error", 500: "server_error"}
# Anthropic's error types by status (its overloaded_error is a 529; ours is a 503, as the other routes send).
ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                   404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
                   503: "overloaded_error"}
MESSAGES_PATH = "/v1/messages"


class APIError(Exception):
    """A refusal with its HTTP status, OpenAI error code and the field it is about."""

    def __init__(self, status: int, message: str, code: str | None = None, param: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.headers = headers

    def body(self, path: str = "") -> dict:
        """The error as the route at `path` answers it (Anthropic's shape on its Messages routes)."""
        if is_messages(path):
            return {"type": "error", "error": {"type": ANTHROPIC_TYPES.get(self.status, "invalid_request_error"),
                                               "message": self.message}}
        return error_body(self.status, self.message, self.code, self.param)

    def response(self, path: str = "") -> JSONResponse:
        return JSONResponse(self.body(path), status_code=self.status, headers=self.headers)


def not_served(where: str, kind: object, served: str) -> APIError:
    """The refusal of a part, block, item or tool of a type this server does not serve, by its place (every
    route says it so): `where` is its place (`messages.1.content.0`), `served` what is served there."""
    return APIError(400, f"{where}: {kind!r} is not served here: only {served}", "invalid_value", f"{where}.type")


def is_messages(path: str) -> bool:
    """Whether `path` is one of Anthropic's Messages routes."""
    return path == MESSAGES_PATH or path.startswith(MESSAGES_PATH + "/")


def error_body(status: int, message: str, code: str | None = None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": TYPES.get(status, "invalid_request_error"),
                      "param": param, "code": code}}


def validation_error(err: RequestValidationError | ValidationError, where: str = "") -> APIError:
    """pydantic's first complaint as one sentence naming the field, as OpenAI answers a wrong type; `where`:
    the field a part of the body checked on its own stands at (`input.2`)."""
    first = err.errors()[0]
    if first.get("type") == "json_invalid":
        return APIError(400, "the request body is not valid JSON", "invalid_json")
    loc = ([where] if where else []) + [str(p) for p in first.get("loc", ()) if p != "body"]
    # A union reports each of its arms (`stop.str`, `stop.list[str]`): name the field once.
    param = ".".join(p for p in loc if not any(c in p for c in "[]") and p not in {"str", "int", "bool", "float"})
    if first.get("type") == "missing":
        return APIError(400, f"missing required parameter: {param or 'body'}", "missing_required_parameter", param)
    if first.get("type") == "extra_forbidden":
        return APIError(400, f"unrecognized parameter: {param}", "unknown_parameter", param)
    message = first.get("msg", "invalid value")
    return APIError(400, f"invalid value for {param or 'the body'}: {message}", "invalid_value", param or None)


def install(app: FastAPI) -> None:
    """Route every failure through its route's error shape."""

    @app.exception_handler(APIError)
    async def _api(request: Request, err: APIError) -> JSONResponse:
        return err.response(request.url.path)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        if request.method == "POST" and not is_json(request.headers.get("content-type", "")):
            # FastAPI reads such a body as bytes (which keeps web pages from posting here): say what to send.
            return APIError(400, f"the request body must be JSON: send Content-Type: application/json "
                                 f"(got {request.headers.get('content-type') or 'none'})",
                            "invalid_content_type").response(request.url.path)
        return validation_error(err).response(request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, err: StarletteHTTPException) -> JSONResponse:
        if err.status_code == 400:  # FastAPI's only 400 of its own: a JSON body it could not read
            return unreadable_json(err.__cause__).response(request.url.path)
        message = {404: f"no such route: {request.method} {request.url.path}",
                   405: f"method {request.method} is not allowed on {request.url.path}"}.get(err.status_code, str(err.detail))
        return APIError(err.status_code, message, None).response(request.url.path)

    @app.exception_handler(Exception)
    async def _bug(request: Request, err: Exception) -> JSONResponse:
        user_error(err, f"request {request.method} {request.url.path} failed")  # the traceback to the log file
        return APIError(500, f"internal error ({type(err).__name__}); the server's log has the details",
                        "internal_error").response(request.url.path)


def unreadable_json(cause: BaseException | None) -> APIError:
    """Why FastAPI could not read a JSON body: nested past what the parser follows, or not UTF-8."""
    if isinstance(cause, RecursionError):
        return APIError(400, "the request body's JSON is nested too deeply to read", "invalid_json")
    return APIError(400, "the request body is not valid JSON (it must be UTF-8)", "invalid_json")


def is_json(content_type: str) -> bool:
    """Whether a Content-Type names JSON (`application/json`, `application/vnd.x+json`, any charset)."""
    kind = content_type.split(";")[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


def sse_error(err: APIError) -> str:
    """A stream's last event when it cannot finish (an error after the first byte)."""
    return f"data: {json.dumps(err.body())}\n\n"


def messages_sse_error(err: APIError) -> str:
    """A Messages stream's last event when it cannot finish: Anthropic's `error` event."""
    return f"event: error\ndata: {json.dumps(err.body(MESSAGES_PATH))}\n\n"
