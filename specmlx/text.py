"""Token ids to streamed text, with stop strings cut cleanly.

Uses mlx-lm's streaming detokenizer. Text that could be the start of a stop
string is held back until it is known not to be one, so no stop string ever
reaches the stream, even one spread over several tokens.
"""

from __future__ import annotations

from typing import Any, Sequence


class TextStream:
    def __init__(self, tokenizer: Any | None, stop: Sequence[str] = ()) -> None:
        self._detok = tokenizer.detokenizer if tokenizer is not None else None
        self._stop = [s for s in stop if s]
        self._released = 0  # characters of the detokenized text handed out
        self.stopped = False

    def add(self, token: int) -> str:
        """Take one token; return the text it releases. Sets `stopped` on a stop string."""
        if self._detok is None:
            return ""
        self._detok.add_token(token)
        text = self._detok.text
        # Released text never holds a stop string's start (see _held_back).
        hits = [i for i in (text.find(s, self._released) for s in self._stop) if i >= 0]
        if hits:
            self.stopped = True
            return self._release(text, min(hits))
        return self._release(text, len(text) - self._held_back(text))

    def finish(self) -> str:
        """Flush what was held back at the end of generation."""
        if self._detok is None or self.stopped:
            return ""
        self._detok.finalize()
        text = self._detok.text
        return self._release(text, len(text))

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
