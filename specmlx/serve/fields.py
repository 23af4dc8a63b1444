"""What every API's request bodies share: OpenAI's caps on tools and calls (a chat request holds every
dialect to them), the `speculative` extension object, and a part or block of a kind not served."""

from __future__ import annotations

from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

# OpenAI's own caps: 128 tools a request, and a function's name of 64 letters, digits, `_` or `-`
# (which also keeps a name safe to write into a grammar's string).
MAX_TOOLS = 128
FUNCTION_NAME = r"^[A-Za-z0-9_-]{1,64}$"
MAX_CALL_ID = 256  # ours: ids come back from clients (OpenAI's, Anthropic's `toolu_...`), a few dozen characters


class Speculative(BaseModel):
    """The `speculative` extension object: how this request drafts. Unset
    fields take the server's defaults (its command line)."""

    model_config = ConfigDict(extra="forbid")  # ours: a misspelt field is an error, not a silent default

    drafter: StrictStr | None = None  # "default", "none", "ngram" or a loaded drafter's name
    num_draft: StrictInt | None = Field(default=None, ge=0, le=64)
    auto: StrictBool | None = None
    max_draft: StrictInt | None = Field(default=None, ge=1, le=64)
    lookup: StrictInt | None = Field(default=None, ge=0, le=8)
    sources: StrictBool = False  # each token's source (draft, corrected, bonus, target) in the response


class Unserved(BaseModel):
    """A content part or block of a kind not served (chat's `image_url`, `input_audio`, `file`; Anthropic's
    `image`, `document`...): kept to be refused by its place (`errors.not_served`)."""

    model_config = ConfigDict(extra="allow")
    type: StrictStr


def kind_of(served: tuple[str, ...]) -> Callable[[Any], str | None]:
    """pydantic's discriminator of parts (or blocks): their type where it is among `served`, else "other"."""
    def kind(part: Any) -> str | None:
        found = part.get("type") if isinstance(part, dict) else getattr(part, "type", None)
        return found if found in served else None if found is None else "other"
    return kind
