"""Suffix lookup: draft by copying what followed the context's tail anywhere in its owner's session.

Prompt lookup sees the current prompt only; agents repeat tool calls, file contents and test output
across the turns and subagents of one session. This drafter keeps, per owner (an API key's id; None
without keys), a bounded corpus of every context its conversations showed it, prompts and answers,
indexed by n-grams, and proposes the continuation of the longest match of the tail (vLLM's suffix
decoding, with a hash map in place of its suffix tree). Its proposals are deterministic copies, so
verification stays exact at every temperature, as prompt lookup's do.

Every instance made by `fresh` shares its loaded drafter's `Sessions`; a server tells each one
whose request it serves (`serve`, the `Remembers` capability), and, once the request is done, the
context it ended with (`remember`), so that an owner's turns drafted by another drafter (a model,
prompt lookup, none) are remembered too. An owner's text is only ever proposed
to that owner: acceptance would otherwise leak another key's prompts. All calls come from the one
MLX thread (`mlx_thread`), so nothing here locks.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Hashable, Sequence

import mlx.core as mx

from ..sampling import SamplingParams
from ..schedule.widths import cut
from .base import Draft, HoldsNothing
from .labels import SUFFIX

MIN_MATCH = 2  # a one-token match is mostly chance, and prompt lookup covers it
MAX_MATCH = 32  # the longest tail compared; a match this long is as good as certain
KEYS = (2, 4, 8, 16)  # the n-gram lengths indexed: a hit at n is extended backwards to MAX_MATCH
# A short match is often chance and its continuation soon wrong: a draft is at most this many tokens
# per matched one (vLLM's max_spec_factor), so a 2-token match risks 2 verify rows, a 16-token one 16.
SPEC_FACTOR = 1
# Tokens kept per owner (a 9,500-token agent prefix and its turns), oldest dropped: with its index,
# about 13 MB at the cap (measured, all n-grams distinct). Owners kept: the least recently served goes first.
CORPUS_CAP = 1 << 15
OWNERS_CAP = 8


@dataclass(frozen=True)
class Match:
    """Where the tail was found: `at`, the absolute position of the token that followed it; `length`,
    how many tokens matched; `end`, where the document it was found in ends (copies stop there)."""

    at: int
    length: int
    end: int


class Corpus:
    """One owner's tokens as documents (each conversation's run of text), oldest dropped past `cap`.

    Positions are absolute (they keep counting past what was dropped). `index[n]` maps the hash of
    each n-gram to the latest position that followed it within its document, so that a match never
    spans two documents; `after` does so for single tokens (`may_propose`)."""

    def __init__(self, cap: int = CORPUS_CAP) -> None:
        self.cap = cap
        self.tokens: list[int] = []
        self.base = 0  # the absolute position of tokens[0]
        self.starts: list[int] = []  # the absolute position each document starts at
        self.writer: object = None  # the document being written last (`SuffixDrafter._doc`)
        self.after: dict[int, int] = {}
        self.index: dict[int, dict[int, int]] = {n: {} for n in KEYS}

    @property
    def end(self) -> int:
        return self.base + len(self.tokens)

    def open(self, writer: object, lead: Sequence[int]) -> None:
        """Start a document for `writer`, with `lead` (the tokens before its first new ones) for context."""
        self.starts.append(self.end)
        self.writer = writer
        self.extend(lead)

    def extend(self, new: Sequence[int]) -> None:
        """Append `new` to the last document and index it; past the cap, drop the oldest quarter."""
        first = self.end
        self.tokens.extend(new)
        self._index(first, self.end, self.starts[-1])
        if len(self.tokens) > self.cap:
            self._drop(self.end - (self.cap - self.cap // 4))

    def _index(self, first: int, stop: int, start: int) -> None:
        """Index positions first..stop-1 of the document starting at `start`: what precedes each."""
        tokens, base, index = self.tokens, self.base, self.index
        for p in range(max(first, start + 1), stop):
            i = p - base
            self.after[tokens[i - 1]] = p
            for n in KEYS:
                if p - n < start:
                    break
                index[n][hash(tuple(tokens[i - n : i]))] = p

    def _drop(self, cut_at: int) -> None:
        """Forget the tokens before `cut_at`, and index the rest again (amortised: a quarter of the cap
        is appended between two drops)."""
        self.tokens = self.tokens[cut_at - self.base :]
        self.base = cut_at
        self.starts = [cut_at] + [s for s in self.starts if s > cut_at]
        self.after = {}
        self.index = {n: {} for n in KEYS}
        for start, stop in zip(self.starts, [*self.starts[1:], self.end]):
            self._index(start, stop, start)

    def match(self, tail: Sequence[int]) -> Match | None:
        """The latest occurrence, followed by a token, of the longest indexed n-gram ending `tail`,
        extended backwards up to `MAX_MATCH` tokens within its document; None if none."""
        for n in reversed(KEYS):
            if len(tail) < n:
                continue
            gram = list(tail[-n:])
            at = self.index[n].get(hash(tuple(gram)))
            if at is None or self.tokens[at - n - self.base : at - self.base] != gram:  # a hash collision
                continue
            doc = bisect_right(self.starts, at - 1) - 1
            start, end = self.starts[doc], (self.starts[doc + 1] if doc + 1 < len(self.starts) else self.end)
            length = n
            while (length < min(MAX_MATCH, len(tail)) and at - length - 1 >= start
                   and self.tokens[at - length - 1 - self.base] == tail[-length - 1]):
                length += 1
            return Match(at, length, end)
        return None

    def copy(self, found: Match, limit: int) -> list[int]:
        """Up to `limit` tokens from `found.at`, within its document."""
        return self.tokens[found.at - self.base : min(found.at + limit, found.end) - self.base]


class Sessions:
    """Every owner's corpus, shared by all the instances `fresh` makes of one loaded drafter."""

    def __init__(self, cap: int = CORPUS_CAP, owners: int = OWNERS_CAP) -> None:
        self.cap, self.owners = cap, owners
        self._corpora: OrderedDict[Hashable, Corpus] = OrderedDict()

    def corpus(self, owner: Hashable) -> Corpus:
        """`owner`'s corpus (new if none), now the most recently used."""
        corpus = self._corpora.pop(owner, None) or Corpus(self.cap)
        self._corpora[owner] = corpus
        while len(self._corpora) > self.owners:
            self._corpora.popitem(last=False)
        return corpus


class SuffixDrafter(HoldsNothing):
    """Deterministic drafter: its q is one-hot, so verification stays exact.

    It writes its conversation into its owner's corpus as it sees it (`prefill`, `draft`,
    `may_propose`), from where it last stopped; a context that no longer extends what it wrote
    (a rewind below it, another conversation) continues in a new document. Its state is that shared
    corpus, which a slot's emptying does not free: it counts no bytes of its own."""

    name = SUFFIX
    drafts = True

    def __init__(self, sessions: Sessions | None = None) -> None:
        self.sessions = Sessions() if sessions is None else sessions
        self.owner: Hashable = None
        self._restart()

    def _restart(self) -> None:
        self._seen: list[int] = []  # the conversation's tokens written so far
        self._sure = 0  # how many of them are known to still be the context's (checked, or not rewound)
        self._doc = object()  # this conversation's current document (`Corpus.writer`)

    def serve(self, owner: Hashable) -> None:
        """Serve `owner`'s requests from now on: propose only from its text (`Remembers`)."""
        if owner != self.owner:
            self.owner = owner
            self._restart()

    def remember(self, tokens: Sequence[int]) -> None:
        """A finished request's context, whichever drafter served it (`Remembers`): written past what this
        conversation wrote already, once a request. Checked whole, as a prompt is: another drafter's
        turns moved the context on without telling this one."""
        self.prefill(tokens)

    def fresh(self) -> "SuffixDrafter":
        return SuffixDrafter(self.sessions)

    def prefill(self, tokens: Sequence[int]) -> None:
        self._sure = 0  # once a request, a whole check: a new prompt may differ anywhere
        self._see(tokens)

    def rewind(self, length: int) -> None:
        self._sure = min(self._sure, length)

    def adopt(self, source: "SuffixDrafter | None", length: int) -> int:
        """A conversation that shares `source`'s start: what source wrote of it is in the corpus already."""
        if source is not None and source.sessions is self.sessions and source.owner == self.owner:
            self._restart()
            self._seen = source._seen[:length]
            self._sure = len(self._seen)
        return length

    def may_propose(self, tokens: Sequence[int]) -> bool:
        # A next tail (last token, any token) matches only where the last token occurred followed by one.
        self._see(tokens)
        return bool(tokens) and tokens[-1] in self.sessions.corpus(self.owner).after

    def draft(
        self, tokens: Sequence[int], num_draft: int, sampling: SamplingParams, key: mx.array,
        p_min: float = 0.0, allowed: Any = None,  # a copy: verified, its forbidden tokens rejected
    ) -> Draft:
        self._see(tokens)
        corpus = self.sessions.corpus(self.owner)
        found = corpus.match(tokens[-MAX_MATCH:]) if num_draft > 0 else None
        if found is None:
            return Draft.empty()
        copied = cut(corpus.copy(found, min(num_draft, SPEC_FACTOR * found.length)))
        return Draft(mx.array(copied, dtype=mx.uint32)) if copied else Draft.empty()

    def _see(self, tokens: Sequence[int]) -> None:
        """Write what `tokens` adds to what this conversation wrote; where they part, a new document."""
        seen, checked = self._seen, min(self._sure, len(tokens))
        both = min(len(seen), len(tokens))
        agree = both if tokens[checked:both] == seen[checked:both] else _parted(tokens, seen, checked, both)
        if agree < both:
            del seen[agree:]
            self._doc = object()
        self._sure = agree
        if len(tokens) <= len(seen):
            return
        corpus = self.sessions.corpus(self.owner)
        if corpus.writer is not self._doc:  # another conversation wrote since, or this one parted
            corpus.open(self._doc, seen[-MAX_MATCH:])
        new = list(tokens[len(seen) :])
        corpus.extend(new)
        seen.extend(new)
        self._sure = len(seen)


def _parted(tokens: Sequence[int], seen: list[int], start: int, stop: int) -> int:
    """The first position from `start` where `tokens` and `seen` differ (`stop` if none before it)."""
    i = start
    while i < stop and tokens[i] == seen[i]:
        i += 1
    return i
