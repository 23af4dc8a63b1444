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
from ..hidden import decoder_taps, head
from ..plan import Plan, Round
from ..caches.replay import recording
from ..round import Proposal, constrain, copied_draft, draw, probe_chance, verify
from ..sampling import warp
from ..caches.batch import BatchCache
from .drafting import SharedDrafter, as_draft
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
    (`width`, padding included), the drafting's seconds when timed apart, and its steps."""

    rounds: tuple[Round, ...]
    width: int
    draft_s: float | None
    steps: int  # drafter steps run one after another: a shared drafter's forward is one for all its rows


def run_batch(target: nn.Module, cache: BatchCache, members: Sequence[Member], plans: Sequence[Plan],
              timed: bool = False, shared: Sequence[SharedDrafter] = ()) -> BatchRound:
    """One round for every member, as `plans` say; with `timed`, drafting is synced and timed apart.
    Members in a `shared` drafter's rows draft in its forwards, the others on their own."""
    start = perf_counter()
    keys = [mx.random.split(m.next_key()) for m in members]
    proposals, steps = propose_all(members, plans, [k[0] for k in keys], shared)
    proposals, masks = constrain_all(members, proposals, shared)
    drafts = [proposed.draft for proposed in proposals]
    if timed:
        mx.eval([d.tokens for d in drafts], [d.probs for d in drafts if d.probs is not None])
    draft_s = perf_counter() - start
    width, logits = score(target, cache, members, drafts)
    outcomes = []
    for m, proposed, rows, mask, key in zip(members, proposals, logits, masks, keys):
        rows = rows if mask is None else mx.where(mask, rows, -mx.inf)  # a row under a grammar: what it allows
        p = None if m.config.sampling.greedy else mx.exp(warp(rows, m.config.sampling))
        draft = proposed.draft
        outcomes.append((draft.tokens, *verify(rows, p, draft, key[1]), probe_chance(proposed.probe, rows, p)))
    # The round's one blocking host sync, for every row at once.
    mx.eval([o for outcome in outcomes for o in outcome if o is not None],
            [layer.state for layer in cache.layers])
    done = []
    for m, proposed, (tokens, accepted, following, chance) in zip(members, proposals, outcomes):
        m.rec.host_syncs += 1 + timed
        m.rec.timed_rounds += timed  # as a round alone counts it: host syncs are rounds plus timed rounds
        kept, draft = int(accepted.item()), proposed.draft
        done.append(Round(tuple(tokens.tolist()[:kept]) + (int(following.item()),), draft.size, proposed.looked_up,
                          draft_s if timed else None, None if chance is None else chance.item(), draft.predicted,
                          blocked=draft.blocked))
    cache.keep([len(m.tokens) + r.accepted for m, r in zip(members, done)])
    rewind_drafters(members, done, shared)
    for m, r in zip(members, done):
        if m.constraint is not None:
            m.constraint.advance(r.tokens)
    for m in members:
        m.rec.draft_s += draft_s
        m.rec.verify_s += perf_counter() - start - draft_s
    return BatchRound(tuple(done), width, draft_s if timed else None, steps)


def constrain_all(members: Sequence[Member], proposals: list[Proposal], shared: Sequence[SharedDrafter] = ()
                  ) -> tuple[list[Proposal], list[mx.array | None]]:
    """Rows under a grammar: their drafts' tokens on the host (one more sync, for them all), then each
    constrained as a round alone constrains it (`round.constrain`). None for a row without a grammar.
    A grammar that fails fails its row alone (`RowFailure`)."""
    bound = [i for i, m in enumerate(members) if m.constraint is not None]
    masks: list[mx.array | None] = [None] * len(members)
    if not bound:
        return proposals, masks
    mx.eval([proposals[i].draft.tokens for i in bound])
    out = list(proposals)
    for i in bound:
        try:
            out[i], masks[i] = constrain(proposals[i], members[i].constraint)
        except Exception as err:  # noqa: BLE001 - one request's grammar fails that request alone
            undraft(members, shared)
            raise RowFailure(members[i], err) from err
    return out, masks


def propose_all(members: Sequence[Member], plans: Sequence[Plan], keys: Sequence[mx.array],
                shared: Sequence[SharedDrafter]) -> tuple[list[Proposal], int]:
    """Every row's proposal, and the drafter steps run one after another."""
    grouped = {id(m) for group in shared for m in group.rows}
    proposals: dict[int, Proposal] = {}
    steps = 0
    for m, plan, key in zip(members, plans, keys):
        if id(m) in grouped:
            continue
        try:
            proposed = proposals[id(m)] = draw(m, plan, key)  # as a round alone draws it
        except Exception as err:  # noqa: BLE001 - one request's drafter fails that request alone
            undraft(members, shared)
            raise RowFailure(m, err) from err
        steps += (0 if proposed.looked_up else proposed.draft.steps) + (proposed.probe is not None)
    plan_of = {id(m): (plan, key) for m, plan, key in zip(members, plans, keys)}
    for group in shared:
        steps += _propose_shared(group, plan_of, proposals)
    return [proposals[id(m)] for m in members], steps


def _propose_shared(group: SharedDrafter, plan_of: dict, proposals: dict) -> int:
    """The rows of one shared drafter: looked up where the context has it, else drafted
    together; returns the steps their forwards took. None is under a grammar (`shares`): those
    draw alone, their drafts and probes masked (`round.draw`)."""
    counts, keys = {}, {}
    for m in group.rows:
        plan, key = plan_of[id(m)]
        found = copied_draft(m.tokens, plan.num_draft, m.room, m.config.policy, m.prediction)
        if found is not None:
            proposals[id(m)] = Proposal(found, True)
            counts[id(m)] = 0
        else:
            counts[id(m)] = plan.num_draft if plan.num_draft else int(plan.probe)
        keys[id(m)] = key
    steps = max(counts.values(), default=0)  # a plan never drafts past its room
    draws = group.draft(steps, keys, counts) if steps else None
    for m in group.rows:
        if id(m) in proposals:
            continue
        plan = plan_of[id(m)][0]
        if plan.num_draft:
            proposals[id(m)] = Proposal(as_draft(draws[group.rows.index(m)], counts[id(m)]), False)
        else:
            probe = as_draft(draws[group.rows.index(m)], 1) if plan.probe and draws else None
            proposals[id(m)] = Proposal(Draft.empty(), False, probe)
    return steps


def undraft(members: Sequence[Member], shared: Sequence[SharedDrafter]) -> None:
    """A round that will not run: drafters that already drafted drop it, back to what the target scored."""
    for m in members:
        m.engine.drafter.rewind(len(m.tokens) - 1)
    for group in shared:
        group.keep({id(m): len(m.tokens) - 1 for m in group.rows})


def rewind_drafters(members: Sequence[Member], done: Sequence[Round], shared: Sequence[SharedDrafter]) -> None:
    """Each drafter keeps what the committed tokens hold: a shared one, what its own drafts
    that were accepted hold (a looked-up row's drafter saw none of the lookup's tokens)."""
    kept = {id(m): len(m.tokens) + (0 if r.looked_up else r.accepted) for m, r in zip(members, done)}
    for group in shared:
        group.keep(kept)
    grouped = {id(m) for group in shared for m in group.rows}
    for m, r in zip(members, done):
        if id(m) not in grouped:
            m.engine.drafter.rewind(len(m.tokens) + r.accepted)


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
    # (B, width, H); taps (B, width, T, H) when a row's drafter fuses target layers
    union = fused_layers(members)
    with recording(target, cache):  # a recurrent layer's rows each keep their own length (`keep`)
        hidden, taps = decoder_taps(target, mx.stack(rows), cache.layers, union)
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
            m.engine.drafter.observe(start, hidden[i, :count], row_taps(m.engine.fused_layers, union, taps, i, count))
    return width, out


def fused_layers(members: Sequence[Member]) -> tuple[int, ...]:
    """Every target layer some row's drafter fuses: the one batched forward taps them all."""
    return tuple(sorted({layer for m in members for layer in m.engine.fused_layers}))


def row_taps(mine: tuple[int, ...], union: tuple[int, ...], taps: mx.array | None, row: int,
             count: int) -> mx.array | None:
    """One row's taps, (count, T, H), of the layers its own drafter fuses (None: it fuses none)."""
    if not mine:
        return None
    picked = taps[row, :count]
    return picked if mine == union else picked[:, mx.array([union.index(layer) for layer in mine])]
