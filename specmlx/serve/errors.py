"""Errors on the wire: a refusal (`APIError`), in the shape of the API its route speaks: Anthropic's on its
Messages routes (`anthropic/errors.py`), OpenAI's on every other (`openai/errors.py`).

Every way a request can fail ends here, so a client always gets one sentence
and a status, never a traceback, and no bad request stops the server. The shape
follows the request's path, so that the checks in front of every route (the API
key, the body cap) answer each client in its own.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..log import user_error
from .anthropic.errors import error_body as anthropic_body
from .anthropic.errors import is_messages
from .openai.errors import error_body


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
            return anthropic_body(self.status, self.message)
        return error_body(self.status, self.message, self.code, self.param)

    def response(self, path: str = "") -> JSONResponse:
        return JSONResponse(self.body(path), status_code=self.status, headers=self.headers)


def not_served(where: str, kind: object, served: str) -> APIError:
    """The refusal of a part, block, item or tool of a type this server does not serve, by its place (every
    route says it so): `where` is its place (`messages.1.content.0`), `served` what is served there."""
    return APIError(400, f"{where}: {kind!r} is not served here: only {served}", "invalid_value", f"{where}.type")


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

