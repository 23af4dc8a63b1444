"""Stop drafting once the drafter is unsure (llama.cpp's `--draft-p-min`).

A step whose top probability is low is likely rejected, and every token
drafted after a rejection is wasted work; on a CPU each 0.5B step costs about
a third of a target step. Checking needs the step's value on the host: one
small sync per drafted token, paid only when `p_min` > 0.

The check reads the drafter's distribution at that step only (its top
probability), never the token sampled from it nor the target, and the token of
that step is still proposed. So the proposal at every position keeps its
distribution q, only fewer positions are proposed, and verification stays
exact at every temperature.
"""

from __future__ import annotations

import mlx.core as mx


def unsure(scores: mx.array, p_min: float) -> bool:
    """True when the distribution with log-scores `scores` (logits or
    log-probabilities, -inf allowed) puts less than `p_min` on its top token."""
    if p_min <= 0:
        return False
    top = mx.exp(mx.max(scores) - mx.logsumexp(scores))
    return top.item() < p_min
