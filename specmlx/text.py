"""Token ids to streamed text, with stop strings cut cleanly.

Uses mlx-lm's streaming detokenizer. Text that could be the start of a stop
string is held back until it is known not to be one, so no stop string ever
reaches the stream, even one spread over several tokens.

mlx-lm's BPE detokenizer, and its SentencePiece one where the tokenizer's decoder
strips, drop the leading space of the first text they make: right for a chat's
answer, wrong for a completion, whose answer continues the prompt's text (`x =`
then ` 1`). Such a stream (`continues_text`) first feeds the detokenizer a
primer, a clean token of its own, and streams only what follows it, so the
answer's text is never the first and keeps its space.
"""

from __future__ import annotations

from typing import Any, Sequence

from .errors import SpecmlxError

# Any clean text would do: one letter is one token in every vocabulary at hand.
PRIMER = "a"


class TextStream:
    """One generation's text, token by token. `continues_text`: the answer continues the
    prompt's text (a completion), so its leading space is kept."""

    def __init__(self, tokenizer: Any | None, stop: Sequence[str] = (), continues_text: bool = False) -> None:
        self._detok = tokenizer.detokenizer if tokenizer is not None else None
        self._stop = [s for s in stop if s]
        self._released = 0  # characters of the answer's text handed out
        # The primer's characters, never streamed nor searched for stop strings.
        self._primed = prime(tokenizer, self._detok) if continues_text and self._detok is not None else 0
        self.stopped = False
        self.matched = ""  # the stop string that stopped it

    def add(self, token: int) -> str:
        """Take one token; return the text it releases. Sets `stopped` on a stop string."""
        if self._detok is None:
            return ""
        self._detok.add_token(token)
        text = self._text()
        # Released text never holds a stop string's start (see _held_back).
        hits = [(i, s) for i, s in ((text.find(s, self._released), s) for s in self._stop) if i >= 0]
        if hits:
            at, self.matched = min(hits)
            self.stopped = True
            return self._release(text, at)
        return self._release(text, len(text) - self._held_back(text))

    def finish(self) -> str:
        """Flush what was held back at the end of generation."""
        if self._detok is None or self.stopped:
            return ""
        self._detok.finalize()
        text = self._text()
        return self._release(text, len(text))

    def _text(self) -> str:
        """The answer's text so far: the detokenizer's, after the primer."""
        return self._detok.text[self._primed:]

    def _held_back(self, text: str) -> int:
        """Length of the longest tail of `text` that begins some stop string."""
        longest = 0
        for s in self._stop:
            for n in range(min(len(s) - 1, len(text)), longest, -1):
                if text.endswith(s[:n]):
                    longest = n
                    break
        return longest

    def _release(self, text: str, end: int) -> str:
        end = max(end, self._released)
        out = text[self._released : end]
        self._released = end
        return out


def prime(tokenizer: Any, detok: Any) -> int:
    """Feed `detok` the primer; return the length of its text.

    Only the detokenizers' public `add_token` and `text` are used, not their trimming (private
    state, different in each class and mlx-lm version), so one way serves BPE, SentencePiece and
    the naive one. The primer's text must be out whole, as `decode` has it, so that none of it is
    pending to join the answer's first bytes, and not empty, so that the answer's is not the first."""
    ids = tokenizer.encode(PRIMER, add_special_tokens=False)
    for token in ids:
        detok.add_token(token)
    text = detok.text
    if not text or text != tokenizer.decode(ids):
        raise SpecmlxError(f"this tokenizer cannot stream a completion's text: its streaming detokenizer "
                           f"reads {PRIMER!r} (tokens {ids}) as {text!r}")
    return len(text)
