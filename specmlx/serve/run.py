"""Running the app under uvicorn: in the foreground (the command line) or in a thread (tests, the bench).

On Ctrl+C (or SIGTERM) the worker is told first: queued and running requests
end with a clear error (streams get a final error event) instead of holding
the shutdown until their answers are complete, or being cut off silently.
"""

from __future__ import annotations

import socket
import threading
from types import FrameType

import uvicorn
from fastapi import FastAPI

from .errors import APIError
from .worker import Worker

STOPPING = APIError(503, "the server is shutting down; the answer was not finished", "server_shutdown")


class Server(uvicorn.Server):
    def __init__(self, app: FastAPI, worker: Worker, log_level: str = "warning") -> None:
        super().__init__(uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=10,
                                        access_log=log_level in ("info", "debug")))
        self.worker = worker

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.worker.stop(STOPPING)
        super().handle_exit(sig, frame)

    def stop(self) -> None:
        """Shut down as on Ctrl+C, from any thread, with no signal for uvicorn to raise again afterwards."""
        self.worker.stop(STOPPING)
        self.should_exit = True


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (port 0: any free one), so the caller knows the port before serving."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


class Background:
    """A server on 127.0.0.1 in a daemon thread: `with Background(app, worker) as url: ...`.
    Leaving the block stops it (the worker first, as on Ctrl+C) and waits at most `timeout` s."""

    def __init__(self, app: FastAPI, worker: Worker, timeout: float = 30.0) -> None:
        self.server = Server(app, worker)
        self.sock = bind("127.0.0.1", 0)
        self.timeout = timeout
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def __enter__(self) -> str:
        self.thread.start()
        for _ in range(int(self.timeout / 0.02)):
            if self.server.started or not self.thread.is_alive():
                break
            threading.Event().wait(0.02)
        if not self.server.started:
            raise RuntimeError("the server did not start")
        return self.url

    def __exit__(self, *exc) -> None:
        self.server.handle_exit(0, None)
        self.thread.join(self.timeout)
        self.sock.close()
