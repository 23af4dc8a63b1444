"""Warm-up at load: every shape a round may use is run once before the first answer.

A GPU backend compiles kernels for each new shape on first use (MLX's CUDA backend took about 38 s
for a 9-row verify of a 4-bit target), so an answer that met a new width would stall mid-answer.
The warm-up runs, on a throwaway engine (fresh caches sharing the weights: the loaded ones are never
touched), two rounds at each draft length of `schedule.widths` up to the longest a policy allows
(a copy's too: a request's prediction may copy up to `prediction_draft` tokens):
the drafter's steps greedy and sampled, its catch-up on a fully accepted draft, the target's verify
with and without a look-ahead row (k + 1 and k rows), and both verifies and the probe's chance.
On a CPU nothing is compiled per shape and each width costs real forwards, so it runs by default on
a GPU only; `SPECMLX_WARM_UP=1` forces it, `=0` skips it.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

import mlx.core as mx
import mlx.nn as nn

from .caches.kinds import KVBits
from .drafters import Draft, Drafter, drafts_blocks
from .engine import Engine
from .policy import DraftPolicy
from .round import Ahead, look_ahead, probe_chance, score, verify
from .sampling import SamplingParams, warp
from .schedule.widths import COPIED, within

WARM_UP = "SPECMLX_WARM_UP"  # "1": always, "0": never, unset: on a GPU only
# Every filter on, so each sampling op a request may ask for is run (the unfiltered path uses a subset).
SAMPLED = SamplingParams(temp=0.7, top_p=0.95, top_k=20, min_p=0.02)
GREEDY = SamplingParams()
PROMPT = 8  # tokens of throwaway context
WARMED: set[tuple] = set()  # (id of the target, drafter name, policy lengths) warmed in this process


def wanted() -> bool:
    """Whether to warm up at load: as `SPECMLX_WARM_UP` says, else on a GPU only."""
    setting = os.environ.get(WARM_UP, "").strip()
    if setting in ("0", "1"):
        return setting == "1"
    return mx.default_device() == mx.gpu


def warm_up(target: nn.Module, drafter: Drafter, policy: DraftPolicy = DraftPolicy(),
            progress: Callable[[str], None] | None = None, kv: KVBits | None = None) -> tuple[tuple[int, int, int], ...]:
    """Run every draft length of the set up to `policy`'s longest on a throwaway engine of `target`
    and a fresh copy of `drafter`: for each round, its draft length, how many of those the drafter
    drew (0 for zeros) and the rows of the target's forward. One process only: a sharded target's
    ranks would have to run it in lockstep. `kv`: the target's cache as the answers will keep it, whose
    attention's kernels are the ones that run (`--kv-bits`)."""
    engine = Engine(target, drafter.fresh(), eos_token_ids=(), kv=kv)
    tokens = [0] * PROMPT
    engine.prefill(tokens)
    longest = max(policy.max_draft, policy.num_draft or 0)
    if drafts_blocks(drafter):  # a block drafter's lengths, within what one of its forwards proposes
        longest = min(longest, drafter.proposals)
    widths = sorted({*within(longest, drafts_blocks(drafter)),
                     *within(policy.lookup_draft if policy.lookup else 0),
                     *(k for k in COPIED if k <= policy.prediction_draft)})  # a request's prediction copies up to that
    if progress is not None:
        progress(f"warming up draft lengths {', '.join(map(str, widths))} with {drafter.name}")
    ran: list[tuple[int, int, int]] = []
    for k in widths:  # the caches hold all but the last token: the first round's verify scores k + 1 rows
        ran.append((k, *warm_round(engine, tokens, k, GREEDY, None)))
        ahead = look_ahead_on(engine, tokens)  # the second scores its k drafts after a look-ahead row
        ran.append((k, *warm_round(engine, tokens, k, SAMPLED, ahead)))
    return tuple(ran)


def warm_round(engine: Engine, tokens: list[int], k: int, drafting: SamplingParams,
               ahead: Ahead | None) -> tuple[int, int]:
    """One round of `k` drafts drawn as `drafting` says (zeros where the drafter drafts nothing),
    verified greedy and sampled, with the probe's chance, every draft accepted: how many the drafter
    drew, and the rows its target forward scored (0: none, a plain round after a look-ahead)."""
    key = mx.random.key(k)
    draft, drawn = propose(engine, tokens, k, drafting, key)
    hidden, logits = score(engine, tokens, draft.tokens, ahead)
    p = mx.exp(warp(logits, SAMPLED))
    outputs = [verify(logits, None, draft, key), verify(logits, p, draft, key)]
    probe = Draft(draft.tokens[:1], None if draft.probs is None else draft.probs[:1])
    outputs += [c for c in (probe_chance(probe, logits, p), probe_chance(probe, logits, None)) if c is not None]
    mx.eval(draft.tokens, outputs, *([] if hidden is None else [hidden]))
    tokens += draft.tokens.tolist() + [outputs[0][1].item()]  # every draft accepted, then the target's token
    return drawn, 0 if hidden is None else hidden.shape[0]


def look_ahead_on(engine: Engine, tokens: list[int]) -> Ahead:
    """Feed the last committed token to the target (one row), as a plain round's look-ahead does."""
    ahead = look_ahead(engine, mx.array(tokens[-1]))
    mx.eval(ahead.logits)
    return ahead


def propose(engine: Engine, tokens: list[int], k: int, sampling: SamplingParams,
            key: mx.array) -> tuple[Draft, int]:
    """The drafter's `k` tokens, all of them (no p-min), or `k` zeros from one that drafts nothing
    (or, having nothing to read, fewer); and how many the drafter drew."""
    if k and engine.drafter.drafts:
        draft = engine.drafter.draft(tokens, k, sampling, key)
        if draft.size == k:
            return draft, k
    return Draft(mx.zeros((k,), dtype=mx.uint32)), 0


def warm_up_at_load(target: nn.Module, drafters: Sequence[Drafter], policy: DraftPolicy = DraftPolicy(),
                    one_process: bool = True, progress: Callable[[str], None] | None = None,
                    kv: KVBits | None = None) -> None:
    """What a command line, server or bench calls once its models are loaded: when `wanted`, the
    warm-up of each drafter that drafts (any one runs every verify width), on one process only (a
    sharded target's ranks would wait for each other), once a process for a target and drafter."""
    if not (one_process and wanted()):
        return
    drafting = [d for d in drafters if d.drafts] or list(drafters[:1])
    for drafter in drafting:
        done = (id(target), drafter.name, policy.max_draft, policy.num_draft, policy.prediction_draft, kv)
        if done not in WARMED:  # kernels are the process's: a bench's next engine of the pair needs none
            warm_up(target, drafter, policy, progress, kv)
            WARMED.add(done)
