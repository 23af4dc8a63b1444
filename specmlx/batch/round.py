"""One batched round: every row proposes, one target forward scores all rows,
each row is verified on its own, one host sync, each row keeps its own.

Row i feeds `[pending_i, d1..dk_i]` right-padded to the widest row; its
logits are read at its own positions only, verified with its own sampling
settings and key (`round.verify`: the same functions a round alone uses),
and its caches keep exactly its committed tokens (`BatchCache.keep`, the
drafter's own `rewind`). Padding is fed but never read: a row's real
positions come before its padding, so the causal mask hides it from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from time import perf_counter
from typing import Sequence

import mlx.core as mx
import mlx.nn as nn

from ..drafters import Draft
from ..hidden import decoder, head
from ..plan import Plan, Round
from ..round import probe_chance, propose, verify
from ..sampling import warp
from .cache import BatchCache
from .member import Member


class RowFailure(Exception):
    """One member's own work failed (its drafter raised): the round did not run,
    and no other row's state changed. The batch takes that member out."""

    def __init__(self, member: Member, error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.member, self.error = member, error


@dataclass(frozen=True)
class BatchRound:
    """What one batched round did: each member's `Round`, the positions fed a row
    (`width`, padding included), and the drafting's seconds when timed apart."""

    rounds: tuple[Round, ...]
    width: int
    draft_s: float | None

    @property
    def steps(self) -> int:
        return sum(r.steps for r in self.rounds)


def run_batch(target: nn.Module, cache: BatchCache, members: Sequence[Member], plans: Sequence[Plan],
              timed: bool = False) -> BatchRound:
    """One round for every member, as `plans` say; with `timed`, drafting is synced and timed apart."""
    start = perf_counter()
    keys = [mx.random.split(m.next_key()) for m in members]
    proposals = []
    for m, plan, key in zip(members, plans, keys):
        try:
            proposals.append(_propose(m, plan, key[0]))
        except Exception as err:  # noqa: BLE001 - one request's drafter fails that request alone
            for other in members:  # drafters that already drafted drop it: back to what the target scored
                other.engine.drafter.rewind(len(other.tokens) - 1)
            raise RowFailure(m, err) from err
    if timed:
        mx.eval([d.tokens for d, _, _ in proposals], [d.probs for d, _, _ in proposals if d.probs is not None])
    draft_s = perf_counter() - start
    width, logits = score(target, cache, members, [d for d, _, _ in proposals])
    outcomes = []
    for m, (draft, _, probe), rows, key in zip(members, proposals, logits, keys):
        p = None if m.config.sampling.greedy else mx.exp(warp(rows, m.config.sampling))
        outcomes.append((draft.tokens, *verify(rows, p, draft, key[1]), probe_chance(probe, rows, p)))
    # The round's one blocking host sync, for every row at once.
    mx.eval([o for outcome in outcomes for o in outcome if o is not None],
            [layer.state for layer in cache.layers])
    done = []
    for m, (draft, looked_up, _), (tokens, accepted, following, chance) in zip(members, proposals, outcomes):
        m.rec.host_syncs += 1 + timed
        m.rec.timed_rounds += timed  # as a round alone counts it: host syncs are rounds plus timed rounds
        kept = int(accepted.item())
        done.append(Round(tuple(tokens.tolist()[:kept]) + (int(following.item()),), draft.size, looked_up,
                          draft_s if timed else None, None if chance is None else chance.item()))
    cache.keep([len(m.tokens) + r.accepted for m, r in zip(members, done)])
    for m, r in zip(members, done):
        m.engine.drafter.rewind(len(m.tokens) + r.accepted)
        m.rec.draft_s += draft_s
        m.rec.verify_s += perf_counter() - start - draft_s
    return BatchRound(tuple(done), width, draft_s if timed else None)


def _propose(member: Member, plan: Plan, key: mx.array) -> tuple[Draft, bool, Draft | None]:
    """A row's draft (looked up or drafted, as a round alone proposes), and its probe."""
    drafter, sampling = member.engine.drafter, member.config.sampling
    draft, looked_up = propose(drafter, member.tokens, plan.num_draft, member.room, member.config.policy,
                               sampling, key)
    probe = drafter.draft(member.tokens, 1, sampling, key) if plan.probe and not draft.size else None
    return draft, looked_up, probe


def score(target: nn.Module, cache: BatchCache, members: Sequence[Member],
          drafts: Sequence[Draft]) -> tuple[int, list[mx.array]]:
    """One target forward over every row's unscored tokens and draft, right-padded (lazy).
    Returns the width fed and each row's logits at [last, d1..dk]; a drafter that reads hidden states is
    shown its row's scored positions. The head runs once, over the rows read."""
    pending = [m.tokens[n:] for m, n in zip(members, cache.lengths)]
    fed = [len(p) + d.size for p, d in zip(pending, drafts)]
    width = max(fed)
    rows = [mx.concatenate([mx.array(p, dtype=mx.uint32), d.tokens, mx.zeros((width - n,), dtype=mx.uint32)])
            for p, d, n in zip(pending, drafts, fed)]
    scored = list(cache.lengths)
    hidden = decoder(target, mx.stack(rows), cache.layers)  # (B, width, H)
    cache.grown(width)
    read = [(i * width + len(p) - 1, d.size + 1) for i, (p, d) in enumerate(zip(pending, drafts))]
    flat = hidden.reshape(-1, hidden.shape[-1])
    index = mx.array([first + j for first, n in read for j in range(n)], dtype=mx.uint32)
    logits = head(target, flat[index])
    out, at = [], 0
    for i, (m, (_, n), start, count) in enumerate(zip(members, read, scored, fed)):
        out.append(logits[at : at + n])
        at += n
        if m.engine.reads_hidden:
            m.engine.drafter.observe(start, hidden[i, :count])
    return width, out
