"""SentencePiece BPE encoding written out plainly, as a reference for the rebuilt tokenizer.json.

1. Control and user-defined pieces are cut out of the text whole, longest first (SentencePiece
   matches user-defined pieces this way; control pieces are matched as HF and llama.cpp do).
2. Spaces become "▁" (llama.cpp stores user-defined pieces with real spaces, so they are
   compared after the same replacement).
3. In each remaining span, the adjacent pair whose union is the best-scoring normal piece is
   merged (leftmost on ties) until none is left.
4. A symbol that is not a piece is spelled as its UTF-8 byte pieces <0xNN>.
"""

from __future__ import annotations

from collections import defaultdict

NORMAL, CONTROL, USER_DEFINED = 1, 3, 4


class SentencePieceReference:
    def __init__(self, tokens: list[str], types: list[int], scores: list[float]):
        self.types, self.scores = types, scores
        self.ids: dict[str, int] = {}
        for i, (t, k) in enumerate(zip(tokens, types)):
            self.ids.setdefault(t.replace(" ", "▁") if k == USER_DEFINED else t, i)
        self.whole: dict[str, list[str]] = defaultdict(list)  # first char -> pieces, longest first
        for t, k in zip(tokens, types):
            if k in (CONTROL, USER_DEFINED) and t:
                self.whole[t[0]].append(t)
        for pieces in self.whole.values():
            pieces.sort(key=len, reverse=True)

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        start = i = 0
        while i < len(text):
            match = next((w for w in self.whole.get(text[i], ()) if text.startswith(w, i)), None)
            if match is None:
                i += 1
                continue
            out += self._merge(text[start:i])
            out.append(self.ids[match.replace(" ", "▁")])
            i += len(match)
            start = i
        return out + self._merge(text[start:])

    def _merge(self, span: str) -> list[int]:
        symbols = list(span.replace(" ", "▁"))
        while True:
            best, best_score = None, None
            for j in range(len(symbols) - 1):
                piece = self.ids.get(symbols[j] + symbols[j + 1])
                if piece is not None and self.types[piece] == NORMAL:
                    if best_score is None or self.scores[piece] > best_score:
                        best, best_score = j, self.scores[piece]
            if best is None:
                break
            symbols[best : best + 2] = [symbols[best] + symbols[best + 1]]
        out = []
        for s in symbols:
            out += [self.ids[s]] if s in self.ids else [self.ids[f"<0x{b:02X}>"] for b in s.encode("utf-8")]
        return out
