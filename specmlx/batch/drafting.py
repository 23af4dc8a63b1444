"""Drafting for many rows in one forward a step: rows that draft with the same small model.

A model drafter's step reads all its weights for one token; for a batch of
rows, one forward of all rows costs little more than one row's, so the rows
whose drafter runs the same small model (`ModelDrafting.draft_model`), and who stop
drafts on no p-min (a sync per step and per row), draft together. Their
drafter caches live in one `BatchCache` while they are in the batch, as the
target's do.

A round feeds each row what its cache has not seen (its last token, and the
last draft after a round that accepted all), ragged rows rolled level, then
`steps` single tokens: each row's own draw, made as `drafters.loop` makes it
(its own sampling settings and keys, q recorded above temperature 0). A row
that asked for fewer drafts keeps drafting with the others, and what it did
not ask for is neither proposed nor kept. After verification each row keeps
what its committed tokens hold and no more (`keep`).
"""

from __future__ import annotations

from typing import Sequence

import mlx.core as mx

from ..drafters import Draft, ModelDrafting
from ..sampling import sample, warp
from ..vocab import fit_vocab
from ..caches.batch import BatchCache
from .member import Member


def shares(member: Member) -> bool:
    """Whether `member` drafts in a shared forward: a model drafter, with no p-min and no grammar (whose
    draws are masked by what the row's grammar allows after each, known only after a sync per step),
    and no recurrent layers (its rows would rewind inside several forwards a round: it drafts on its own row)."""
    drafter = member.engine.drafter
    return (drafter.draft_model is not None and member.config.policy.p_min == 0
            and member.constraint is None and not drafter.cache.rewindable)


class SharedDrafter:
    """The rows of one drafter model, in the order they joined."""

    def __init__(self, drafter: ModelDrafting) -> None:
        self.model, self.vocab_size = drafter.draft_model, drafter.vocab_size
        self.cache = BatchCache(len(drafter.cache))
        self.rows: list[Member] = []
        self.fed = 0  # positions the round's first step fed a row (more than 2: it caught up on skipped tokens)

    def join(self, member: Member) -> None:
        own = member.engine.drafter.cache
        self.cache.move_in(own, own.length)
        self.rows.append(member)

    def leave(self, member: Member) -> None:
        self.cache.move_out(self.rows.index(member), member.engine.drafter.cache)
        self.rows.remove(member)

    def draft(self, steps: int, keys: dict[int, mx.array],
              counts: dict[int, int]) -> list[list[tuple[mx.array, mx.array | None]]]:
        """`steps` draws for every row (lazy): each step's (token, q or None), row by row.
        `keys[id(member)]` is the row's drafting key, split into `counts[id(member)]` (the
        draws it asked for) as a drafter alone splits it; draws past those reuse them."""
        before = list(self.cache.lengths)
        unseen = [m.tokens[n:] for m, n in zip(self.rows, before)]
        width = self.fed = max(map(len, unseen))
        fed = mx.array([u + [0] * (width - len(u)) for u in unseen], dtype=mx.uint32)
        splits = [mx.random.split(keys[id(m)], max(counts[id(m)], 1)) for m in self.rows]
        draws: list[list[tuple[mx.array, mx.array | None]]] = [[] for _ in self.rows]
        for step in range(steps):
            logits = self.model(fed, cache=self.cache.layers)
            self.cache.grown(fed.shape[1])
            if step == 0 and width > 1:  # rows fed fewer: their padding rolled out of the way
                self.cache.keep([n + len(u) for n, u in zip(before, unseen)])
                last = logits[mx.arange(len(self.rows)), mx.array([len(u) - 1 for u in unseen])]
            else:
                last = logits[:, -1]
            tokens = []
            for i, m in enumerate(self.rows):
                token, q = _draw(fit_vocab(last[i], self.vocab_size), m, splits[i][step % splits[i].shape[0]])
                draws[i].append((token, q))
                tokens.append(token)
            fed = mx.stack(tokens).reshape(-1, 1).astype(mx.uint32)
        return draws

    def keep(self, lengths: dict[int, int]) -> None:
        """After verification: row of member m keeps at most `lengths[id(m)]` tokens."""
        self.cache.keep([min(lengths[id(m)], n) for m, n in zip(self.rows, self.cache.lengths)])


def _draw(logits: mx.array, member: Member, key: mx.array) -> tuple[mx.array, mx.array | None]:
    """One row's token at one step, as `drafters.loop.draft_loop` draws it."""
    sampling = member.config.sampling
    if sampling.greedy:
        return mx.argmax(logits), None
    logprobs = warp(logits, sampling)
    return sample(logprobs, key), mx.exp(logprobs)


def as_draft(draws: Sequence[tuple[mx.array, mx.array | None]], count: int) -> Draft:
    """The first `count` draws as a row's draft."""
    if count == 0:
        return Draft.empty()
    tokens = mx.stack([t for t, _ in draws[:count]]).astype(mx.uint32)
    probs = [q for _, q in draws[:count]]
    return Draft(tokens, mx.stack(probs) if probs[0] is not None else None)
