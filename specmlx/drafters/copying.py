"""A drafter's state for the start of a context, copied from another conversation's instance of it.

A new conversation that shares a kept one's start (a system prompt, tools) copies that start's
caches rather than prefilling it (`Engine.adopt`): the drafter's own state comes along where it
has one, so what it proposes is what it would propose had it prefilled the same tokens.
"""

from __future__ import annotations

import mlx.core as mx

from ..cache import copy_prefix
from .base import Drafter, HiddenDrafter
from .history import HiddenHistory
from .model import ModelDrafter


def copy_state(drafter: Drafter, source: Drafter | None, length: int) -> int:
    """Make `drafter` (with no state) hold what `source` (another instance of it whose state covers
    the first `length` tokens, or None) holds of them; how many of them it then covers. A model
    drafter prefills what it lacks itself, so it covers them all; one reading hidden states needs
    a row for every position the target's cache holds, so it covers only the rows it copied."""
    if isinstance(drafter, ModelDrafter):
        if isinstance(source, ModelDrafter):
            copy_prefix(drafter.cache, source.cache, length)
        return length
    if isinstance(drafter, HiddenDrafter):
        mine, theirs = getattr(drafter, "history", None), getattr(source, "history", None)
        if not isinstance(mine, HiddenHistory) or not isinstance(theirs, HiddenHistory):
            return 0
        length = min(length, theirs.length)
        if length > 0:
            rows = mx.contiguous(theirs.rows(0, length))  # its own buffer: the source's may be freed
            mx.eval(rows)
            mine.observe(0, rows)
        return length
    return length  # prompt lookup and none hold nothing
