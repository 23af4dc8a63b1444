"""Reasoning apart from the answer: what a thinking model writes between its think markers.

Models that think (Qwen3 and Qwen3.5/3.6 `<think>`...`</think>`, Gemma 4's channel form) write their
reasoning between markers that mlx-lm's tokenizer wrapper knows (`think_start`, `think_end`). A
template may open the block in the prompt (Qwen3.5's does when thinking is on), so the answer then
begins inside it: `opens_thinking` reads that from the prompt's tokens, as mlx_lm.server reads it
(the prompt's last start marker after its last end marker).

`ReasoningReader` splits the answer's text as it arrives into `Thought`s and the text after them.
Text that may begin a marker is held back until it is known not to be one, as `calls.py` holds a
call's. The white space the syntax puts around the block (`<think>\\n` ... `\\n</think>\\n\\n`) belongs to
neither side. Calls are read from the answer's text only (`reply.Feed`): a call written inside the
reasoning is part of the thought. The split changes what is shown, never what is generated, so
speculation stays exact.
"""

from __future__ import annotations

from typing import Any, Sequence, Union

from .calls import Thought, merged, partial


class ReasoningReader:
    """One answer's reasoning, read as its text arrives (`feed`, then `finish` at its end); `thinking`:
    the answer begins inside the block (its template opened it)."""

    def __init__(self, start: str, end: str, thinking: bool = False) -> None:
        self.start, self.end, self.thinking = start, end, thinking
        self._held = ""  # text not yet handed out: a possible marker's start, or white space before the end
        # Nothing handed out since a marker (or the answer's start inside the block): white space is the
        # syntax's. An answer that begins outside keeps its own (the indentation of the code it opens with).
        self._fresh = thinking

    def feed(self, text: str) -> list[Union[str, Thought]]:
        """The pieces `text` completes: thoughts, and the answer's text, in order."""
        self._held += text
        out: list[Union[str, Thought]] = []
        while True:
            marker = self.end if self.thinking else self.start
            at = self._held.find(marker)
            if at >= 0:
                out.append(self._piece(self._held[:at].rstrip() if self.thinking else self._held[:at]))
                self._held, self.thinking, self._fresh = self._held[at + len(marker):], not self.thinking, True
                continue
            cut = len(self._held) - partial(self._held, marker)
            if self.thinking:  # white space is held back too: the end marker may follow it
                cut = len(self._held[:cut].rstrip())
            out.append(self._piece(self._held[:cut]))
            self._held = self._held[cut:]
            return merged(out)

    def finish(self) -> list[Union[str, Thought]]:
        """What was held back, at the answer's end: a marker never completed is the text it was."""
        held, self._held = self._held, ""
        return merged([self._piece(held)])

    def _piece(self, text: str) -> Union[str, Thought]:
        if self._fresh:
            text = text.lstrip()
            self._fresh = not text
        return Thought(text) if self.thinking and text else text


def opens_thinking(tokenizer: Any, prompt: Sequence[int]) -> bool:
    """Whether the prompt leaves the model inside a think block (its template opened one)."""
    return tokenizer.rfind_think_start(list(prompt)) > tokenizer.rfind_think_end(list(prompt))


def reasoning_reader(tokenizer: Any, prompt: Sequence[int]) -> ReasoningReader | None:
    """A reader of the model's think markers, if it has them (mlx-lm's `has_thinking`)."""
    if not getattr(tokenizer, "has_thinking", False):
        return None
    return ReasoningReader(tokenizer.think_start, tokenizer.think_end, opens_thinking(tokenizer, prompt))
