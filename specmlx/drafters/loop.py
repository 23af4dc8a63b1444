"""The drafting loop every model-based drafter runs, with its own step.

Exactness rests on q: each proposed token must be drawn from the
distribution recorded for it, warped exactly as verification warps p. That
happens here only. A drafter supplies `step`, its network's forward for one
position; this loop splits the keys, picks greedily or samples, collects q,
stops on low confidence (`confidence.py`) and feeds each token back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import mlx.core as mx

from ..sampling import SamplingParams, sample, warp
from .base import Draft
from .confidence import unsure


@dataclass(frozen=True)
class Scores:
    """One draft position's output, built only for the mode asked (lazy).

    Sampling reads `logits`, over the target's vocabulary: what is warped into q.
    Greedy drafting reads `token` and its log-`scores` when the drafter has a
    cheaper argmax than over full logits (a draft vocabulary, a centroid
    head), else the argmax of `logits`.
    """

    logits: mx.array | None = None
    token: mx.array | None = None
    scores: mx.array | None = None


# step(tokens to feed, state, greedy) -> (scores at the last of them, state for the next step)
Step = Callable[[mx.array, Any, bool], tuple[Scores, Any]]
# allowed(tokens drafted so far) -> the tokens a grammar allows next, (V,) booleans
Allowed = Callable[[list[int]], mx.array]


def draft_loop(step: Step, first: mx.array, state: Any, num_draft: int, sampling: SamplingParams,
               key: mx.array, p_min: float, allowed: Allowed | None = None) -> Draft:
    """Propose up to `num_draft` tokens: `first` (uint32 ids) and `state` feed the first step. Under a
    grammar, each step draws from what `allowed` lets through (q masked as verification masks p;
    one small sync a step, to know what was drafted)."""
    keys = mx.random.split(key, num_draft)
    overlap = overlaps_steps()
    tokens, probs, fed, drafted = [], [], first, []
    for i in range(num_draft):
        scores, state = step(fed, state, sampling.greedy and allowed is None)
        logits = scores.logits if allowed is None else mx.where(allowed(drafted), scores.logits, -mx.inf)
        if sampling.greedy and scores.token is not None and allowed is None:
            token, confidence = scores.token, scores.scores
        elif sampling.greedy:
            token, confidence = mx.argmax(logits), logits
        else:
            confidence = warp(logits, sampling)
            token = sample(confidence, keys[i])
        fed = token.reshape(1).astype(mx.uint32)
        if overlap:
            mx.async_eval(fed)
        if allowed is not None:
            # The drafter may score nothing the grammar allows (a head's draft vocabulary): q would be
            # empty, so the draft ends here, a choice made from the tokens before this one, as p-min's is.
            possible = mx.any(logits > -mx.inf)
            mx.eval(possible, fed)
            if not possible.item():
                break
            drafted.append(int(fed.item()))
        tokens.append(fed)
        probs += [] if sampling.greedy else [mx.exp(confidence)]
        if i + 1 < num_draft and unsure(confidence, p_min):
            break
    if not tokens:
        return Draft.empty()
    return Draft(mx.concatenate(tokens), mx.stack(probs) if probs else None)


def overlaps_steps() -> bool:
    """Whether each step starts on the device as soon as it is built, so the host builds the next one
    (or the verify) meanwhile, as mlx-lm's loop overlaps its steps: on a GPU, where a small model's
    step costs about as much to build as to run. A CPU computes on the host's own cores: there the
    overlap measured no gain on a loaded 2-core machine (issue 43, item 6)."""
    return mx.default_device() == mx.gpu
