"""The speed-up speculative decoding should give, after Leviathan et al. (2023).

With each draft token accepted independently with probability `alpha`, a round
of `k` drafts yields (1 - alpha^(k+1)) / (1 - alpha) tokens on average, and
costs k drafter steps plus one target forward; with c = drafter step / target
step, the expected speed-up over the target alone is
(1 - alpha^(k+1)) / ((1 - alpha)(k c + 1)).

alpha is estimated from the measured mean accepted length m by solving
m = (1 - alpha^(k+1)) / (1 - alpha). When every round drafts k tokens, the
acceptance rate gives the same alpha (m - 1 = k * rate). Since the numerator
over (1 - alpha) is then m itself, the prediction is m / (k c + 1): any gap to
the measured speed-up is cost, not acceptance.

The formula counts a verify pass as one target step. On a GPU it nearly is;
on a CPU a forward of k+1 tokens costs more (5 tokens about 1.3 steps here).
Given that measured ratio v, the prediction becomes m / (k c + v), and what
is left between predicted and measured is the loop's own overhead.
"""

from __future__ import annotations


def expected_tokens(alpha: float, k: int) -> float:
    """Mean tokens per round: accepted drafts plus the target's own token."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def alpha_from_mean_accepted(mean_accepted: float, k: int) -> float:
    """The per-token acceptance alpha whose expected tokens per round is `mean_accepted`.

    Clamped to [0, 1]: a mean of 1 or less means nothing was accepted, k+1 or
    more that everything was. `expected_tokens` rises with alpha, so bisect.
    """
    if k < 1 or mean_accepted <= 1.0:
        return 0.0
    if mean_accepted >= k + 1:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(60):  # 2^-60: far below any measurement's precision
        mid = (low + high) / 2
        if expected_tokens(mid, k) < mean_accepted:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def predicted_speedup(alpha: float, k: int, cost_ratio: float, verify_ratio: float = 1.0) -> float:
    """Leviathan's expected speed-up: k drafts per round, drafter/target step cost
    `cost_ratio`, a forward of k+1 tokens costing `verify_ratio` target steps."""
    if cost_ratio < 0:
        raise ValueError(f"cost ratio must be >= 0, got {cost_ratio}")
    if verify_ratio <= 0:
        raise ValueError(f"verify ratio must be > 0, got {verify_ratio}")
    return expected_tokens(alpha, k) / (k * cost_ratio + verify_ratio)
