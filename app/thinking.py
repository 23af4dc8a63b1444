"""A thinking model's reasoning in an answer's text: its markers, and where the reasoning and the
answer lie. No Textual here: the session says which markers an answer uses, the view folds them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from specmlx.serve.reasoning import opens_thinking


@dataclass(frozen=True)
class Thinking:
    """A thinking model's think markers (mlx-lm's `think_start`, `think_end`), and whether its answer
    begins inside the block (its template opened it in the prompt, as Qwen3.5's does)."""

    start: str
    end: str
    inside: bool = False


def split_thought(text: str, thinking: Thinking | None) -> tuple[slice, slice] | None:
    """Where an answer's reasoning and the answer after it lie in its text, the markers and the white
    space around the block left out; None when it has no reasoning. A block the answer opens itself
    counts only at its start; a finished answer that holds an end marker and no start began inside
    one (a reopened chat does not know its prompt)."""
    if thinking is None:
        return None
    begin = len(text) - len(text.lstrip())
    if text.startswith(thinking.start, begin):
        begin += len(thinking.start)
    elif not thinking.inside and (thinking.end not in text or thinking.start in text):
        return None
    end = text.find(thinking.end, begin)
    answer = len(text) if end < 0 else _after_space(text, end + len(thinking.end))  # none yet: still thinking
    end = len(text) if end < 0 else end
    begin = _after_space(text, begin)
    return slice(begin, begin + len(text[begin:end].rstrip())), slice(answer, len(text))


def _after_space(text: str, at: int) -> int:
    return at + len(text[at:]) - len(text[at:].lstrip())


def thinking_of(tokenizer: Any, prompt: Sequence[int] = ()) -> Thinking | None:
    """The markers of a model that thinks (mlx-lm's `has_thinking`), and whether `prompt` opened the block."""
    if not getattr(tokenizer, "has_thinking", False):
        return None
    return Thinking(tokenizer.think_start, tokenizer.think_end, bool(prompt) and opens_thinking(tokenizer, prompt))
