"""Anthropic's error shape on its Messages routes (`/v1/messages...`): `{"type": "error", "error": {"type",
"message"}}`, its type by status."""

from __future__ import annotations

# Anthropic's error types by status (its overloaded_error is a 529; ours is a 503, as the other routes send).
TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
         404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
         503: "overloaded_error"}
MESSAGES_PATH = "/v1/messages"


def is_messages(path: str) -> bool:
    """Whether `path` is one of Anthropic's Messages routes."""
    return path == MESSAGES_PATH or path.startswith(MESSAGES_PATH + "/")


def error_body(status: int, message: str) -> dict:
    return {"type": "error", "error": {"type": TYPES.get(status, "invalid_request_error"), "message": message}}
