"""One speculative round: propose, score, verify, one host sync, commit.

Small functions over a generation's state (`decoding.Decoding`) and its
engine's target, caches and drafter (`parts.Parts`), each lazy until the
round's one sync. `run_round` reads on one screen; a batch's rows propose
with `draw` and `constrain`, and a rank that follows rank 0
(`specmlx.distributed.follower`) reuses `score` and the engine's `sync` and
`rewind`. Exactness lives in `verify.py`: whatever is proposed,
and however much, what is committed follows the target's distribution.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from time import perf_counter
from typing import Sequence

import mlx.core as mx

from .decoding import Decoding
from .drafters import Draft, Drafter
from .drafters.loop import Allowed
from .drafters.ngram import lookup, may_match
from .drafters.prediction import Prediction
from .grammar import Constraint
from .hidden import decoder_taps, head
from .parts import Parts
from .plan import Plan, Round
from .policy import LOOKUP_NGRAM, DraftPolicy
from .caches.replay import recording
from .sampling import SamplingParams, warp
from .schedule.widths import cut
from .verify import acceptance_chance, verify_greedy, verify_sampled


@dataclass(frozen=True)
class Ahead:
    """The target's logits at the position after the last committed token, (1, vocab),
    lazy and already under way: a plain round that overlaps (see `run_round`) fed its
    token to the target before reading it, so the cache holds every committed token."""

    logits: mx.array


@dataclass(frozen=True)
class Proposal:
    """What one generation proposes in a round: its draft, whether the draft was copied (from
    its prediction or its context) rather than drafted, and in a round that drafts nothing, the
    probe its drafter proposed instead (never verified, only weighed: `probe_chance`)."""

    draft: Draft
    looked_up: bool
    probe: Draft | None = None


def run_round(state: Decoding, plan: Plan, ahead: Ahead | None = None,
              overlap: bool = False) -> tuple[Round, Ahead | None]:
    """One round of `state`'s generation as `plan` says: drafting at most `plan.num_draft`
    tokens (its `room` if copied), timing drafting apart with one more sync when
    `plan.timed` or the config's `profile`, and in a round that drafts nothing, probing the
    drafter (`probe_chance`). `ahead`: what the round before scored ahead;
    with `overlap`, a round that proposes nothing returns its own (`start_ahead`)."""
    engine, config, rec = state.engine, state.config, state.rec
    timed = plan.timed or config.profile
    draft_key, verify_key = mx.random.split(state.next_key())
    start = perf_counter()
    # 1. propose: lazy for model drafters (step by step with a p-min), host-side for copies
    proposed, masks = proposal(state, plan, draft_key)
    draft = proposed.draft
    draft_done = perf_counter()
    # 2. score [last, d1..dk] in one target forward (still lazy); under a grammar, only what it allows
    hidden, logits = score(engine, state.tokens, draft.tokens, ahead)
    logits = logits if masks is None else mx.where(masks, logits, -mx.inf)
    # 3. verify (still lazy)
    p = None if config.sampling.greedy else mx.exp(warp(logits, config.sampling))
    n_accepted, following = verify(logits, p, draft, verify_key)
    chance = probe_chance(proposed.probe, logits, p)
    n_accepted, following = engine.peers.decide(n_accepted, following, after=hidden)
    read = [draft.tokens, n_accepted, following, *([chance] if chance is not None else [])]
    keep = (hidden,) if engine.reads_hidden and hidden is not None else ()
    nxt = start_ahead(engine, [*read, *keep], following) if overlap and not draft.size else None
    # 4. the round's one blocking host sync (a second one under a grammar or when timed: see `proposal`)
    proposal_, accepted, following, *probed = engine.sync(rec, *read, keep=keep)
    engine.peers.end_round()
    # 5. commit: both caches drop the rejected tail, an O(1) offset move (a look-ahead keeps its token)
    engine.rewind(len(state.tokens) + accepted + (nxt is not None))
    done = Round(tuple(proposal_[:accepted]) + (following,), draft.size, proposed.looked_up,
                 draft_done - start if timed else None, probed[0] if probed else None, draft.predicted,
                 ahead is not None, draft.blocked)
    if state.constraint is not None:
        state.constraint.advance(done.tokens)
    rec.draft_s += draft_done - start
    rec.verify_s += perf_counter() - draft_done
    return done, nxt


def proposal(state: Decoding, plan: Plan, key: mx.array) -> tuple[Proposal, mx.array | None]:
    """The round's proposal as every process scores it, and under a grammar the rows it allows.

    A grammar needs the draft's tokens on the host to know what it allows after each: one more
    sync for a drafter's (a copy is there already). A copy is cut at its first token the grammar
    forbids: it depends on the committed tokens alone. A sampled draft is not: its length would
    then depend on a draw nobody verifies, and the output would be biased (`grammar.py`)."""
    engine, config, constraint = state.engine, state.config, state.constraint
    proposed = draw(state, plan, key)
    draft = proposed.draft
    if plan.timed or config.profile or (constraint is not None and not proposed.looked_up and draft.size):
        engine.sync(state.rec, draft.tokens, *([draft.probs] if draft.probs is not None else []))
        state.rec.timed_rounds += plan.timed or config.profile
    masks = None
    if constraint is not None:
        proposed, masks = constrain(proposed, constraint)
    draft = proposed.draft
    shared = replace(draft, tokens=engine.peers.propose(draft.tokens, proposed.looked_up))
    return replace(proposed, draft=shared), masks


def draw(state: Decoding, plan: Plan, key: mx.array) -> Proposal:
    """A generation's draft (copied or drafted, under its grammar) and, in a round that drafts
    nothing, its probe (under the grammar too, else its chance would weigh tokens the target
    may not take): lazy for a drafter's, on the host for a copy. A batch's rows draw so too."""
    drafter, sampling, constraint = state.engine.drafter, state.config.sampling, state.constraint
    draft, looked_up = propose(drafter, state.tokens, plan.num_draft, state.room, state.config.policy, sampling,
                               key, state.prediction, None if constraint is None else constraint.after)
    probe = None
    if plan.probe and not draft.size:  # under a grammar, q masked as p is at row 0 (`constraint.masks([])[0]`)
        probe = (drafter.draft(state.tokens, 1, sampling, key) if constraint is None
                 else drafter.draft(state.tokens, 1, sampling, key, allowed=constraint.after))
    return Proposal(draft, looked_up, probe)


def constrain(proposed: Proposal, constraint: Constraint) -> tuple[Proposal, mx.array]:
    """Under a grammar, the draft's tokens already on the host: a copy cut at its first token
    the grammar forbids (a sampled draft is not: see `proposal`), and the rows the grammar allows
    at [last, d1..dk]."""
    draft = proposed.draft
    # Read only when there are any: reading even an empty array waits for the forward running ahead.
    tokens = draft.tokens.tolist() if draft.size else []
    if proposed.looked_up:
        draft = Draft(draft.tokens[: constraint.allowed(tokens)], None, draft.predicted)
    return replace(proposed, draft=draft), constraint.masks(tokens[: draft.size])


def propose(drafter: Drafter, tokens: Sequence[int], num_draft: int, room: int, policy: DraftPolicy,
            sampling: SamplingParams, key: mx.array, prediction: Prediction | None = None,
            allowed: Allowed | None = None) -> tuple[Draft, bool]:
    """The round's draft, and whether it was copied (from the prediction or the context) rather than drafted.

    Whether to copy depends only on the committed tokens, and a copied
    draft is deterministic (q one-hot), so every round still proposes from
    a known q and verification stays exact at every temperature.
    """
    copied = copied_draft(tokens, num_draft, room, policy, prediction)
    if copied is not None:
        return copied, True
    if num_draft == 0:
        return Draft.empty(), False
    if allowed is not None:  # under a grammar: q masked as p will be
        return drafter.draft(tokens, num_draft, sampling, key, policy.p_min, allowed=allowed), False
    return drafter.draft(tokens, num_draft, sampling, key, policy.p_min), False


def copied_draft(tokens: Sequence[int], num_draft: int, room: int, policy: DraftPolicy,
         prediction: Prediction | None) -> Draft | None:
    """The round's copied draft, if any: the prediction's next tokens wherever the output stands
    in it (even in a round planned plain: a copy costs no drafter step, and one that agrees with
    the output is cheap to check), else, when drafting and looking up, the context's. Either is cut
    to a length of the set (`widths.cut`): a copy depends on the committed tokens alone, and so does its cut."""
    if prediction is not None:
        found = cut(prediction.propose(tokens, min(policy.prediction_draft, room)))
        if found:
            return Draft(mx.array(found, dtype=mx.uint32), predicted=True)
    if num_draft and policy.lookup:
        found = cut(lookup(tokens, min(policy.lookup_draft, room), LOOKUP_NGRAM, policy.lookup))
        if found:
            return Draft(mx.array(found, dtype=mx.uint32))
    return None


def proposes_nothing_next(state: Decoding) -> bool:
    """Whether the next round, drafting or not, is sure to propose nothing whatever token this one
    commits: no prediction to copy (one may realign anywhere), and neither the drafter nor the
    context's lookup may match (`Drafter.may_propose`). Known before this round's graph is built;
    asked every round, so the drafter first: a model answers at once, where a lookup searches the context."""
    policy, tokens = state.config.policy, state.tokens
    return (state.prediction is None and not state.engine.drafter.may_propose(tokens)
            and not (policy.lookup and may_match(tokens, policy.lookup)))


def score(engine: Parts, tokens: list[int], draft: mx.array,
          ahead: Ahead | None = None) -> tuple[mx.array | None, mx.array]:
    """The target's forward over the tokens it has not seen and the draft (lazy):
    hidden states of every scored position, and logits of the rows verification
    reads ([last, d1..dk]). A drafter that reads hidden states is shown them all;
    rejected rows are cut by the rewind. After a look-ahead the row of `last` is
    `ahead`'s, and a round with no draft runs no forward of its own (no hidden)."""
    scored = engine.cache_length()
    fed = mx.concatenate([mx.array(tokens[scored:], dtype=mx.uint32), draft])
    if ahead is not None and not fed.size:
        return None, ahead.logits
    with recording(engine.target, engine.cache):  # a recurrent layer's rewind replays what it accepts
        hidden, taps = decoder_taps(engine.target, fed[None], engine.cache, engine.fused_layers)
    hidden = hidden[0]
    logits = head(engine.target, hidden[-(draft.shape[0] + (ahead is None)) :])
    if engine.reads_hidden:
        engine.drafter.observe(scored, hidden, None if taps is None else taps[0])
    if ahead is not None:
        logits = mx.concatenate([ahead.logits, logits])
    return hidden, logits


def start_ahead(engine: Parts, outputs: list[mx.array], following: mx.array) -> Ahead:
    """Start the next position's forward on this round's token before the sync: the target
    computes it while the host commits, streams and plans, as mlx-lm's loop builds its next
    step while the current one computes. This round's outputs are queued first and alone, so
    the sync waits for them, not for the next forward. One process only: ranks score in lockstep."""
    mx.async_eval(*outputs)
    ahead = look_ahead(engine, following)
    mx.async_eval(ahead.logits)
    return ahead


def look_ahead(engine: Parts, following: mx.array) -> Ahead:
    """Feed the round's own next token (lazy) to the target: the next position's logits."""
    scored = engine.cache_length()
    with recording(engine.target, engine.cache):
        hidden, taps = decoder_taps(engine.target, following.reshape(1, 1).astype(mx.uint32), engine.cache,
                                    engine.fused_layers)
    if engine.reads_hidden:
        engine.drafter.observe(scored, hidden[0], None if taps is None else taps[0])
    return Ahead(head(engine.target, hidden[0]))


def verify(logits: mx.array, p: mx.array | None, draft: Draft, key: mx.array) -> tuple[mx.array, mx.array]:
    """Accepted drafts and the next token (lazy): greedy without `p`, else rejection sampling."""
    if p is None:
        return verify_greedy(logits, draft.tokens)
    return verify_sampled(p, draft.probs, draft.tokens, key)


def probe_chance(probe: Draft | None, logits: mx.array, p: mx.array | None) -> mx.array | None:
    """The chance the target would have accepted the probe's one token, had
    it been proposed (lazy). A probe costs a drafter step and no verify
    width; it is never proposed, so output cannot depend on it."""
    if probe is None or not probe.size:
        return None
    q = None if probe.probs is None else probe.probs[0]
    return acceptance_chance(None if p is None else p[0], logits[0], q, probe.tokens[0])
