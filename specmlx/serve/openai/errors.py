"""OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}`, on every route but Anthropic's."""

from __future__ import annotations

TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
         405: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error",
         503: "server_error", 500: "server_error"}


def error_body(status: int, message: str, code: str | None = None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": TYPES.get(status, "invalid_request_error"),
                      "param": param, "code": code}}
