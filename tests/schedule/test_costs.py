"""The round cost model learned from wall times."""

import pytest

from specmlx.schedule.costs import JUMP_PRIOR, STEP_PRIOR, WIDTH_PRIOR, Costs

# A round drafting k: base + k step + (jump + k width if k else 0), as on this CPU.
BASE, STEP, JUMP, WIDTH = 1.0, 0.3, 0.3, 0.12


def seconds(k: int, scale: float = 1.0) -> float:
    return scale * (BASE + k * STEP + (JUMP + k * WIDTH if k else 0.0))


def feed(costs: Costs, ks, scale: float = 1.0, split_every: int = 1) -> None:
    for i, k in enumerate(ks):
        split = k > 0 and i % split_every == 0
        costs.update(seconds(k, scale), steps=k, drafted=k, draft_s=scale * STEP * k if split else None)


def test_priors_until_measured():
    costs = Costs()
    assert not costs.measured and costs.estimate() is None
    assert costs.relative(2) == pytest.approx(1 + 2 * STEP_PRIOR + JUMP_PRIOR + 2 * WIDTH_PRIOR)
    assert costs.relative(0) == 1.0


def test_three_draft_sizes_measure_every_part():
    costs = Costs()
    feed(costs, [4, 0, 1, 3] * 5)
    assert costs.measured
    estimate = costs.estimate()
    assert estimate.base_s == pytest.approx(BASE, rel=0.02)
    assert estimate.step_s == pytest.approx(STEP, rel=0.02)
    assert estimate.jump_s == pytest.approx(JUMP, rel=0.05)
    assert estimate.width_s == pytest.approx(WIDTH, rel=0.05)
    assert estimate.verify_s(1) == pytest.approx(BASE, rel=0.02) and estimate.verify_s(5) == pytest.approx(BASE + JUMP + 4 * WIDTH, rel=0.02)
    assert [costs.relative(k) for k in (0, 1, 3, 4)] == pytest.approx([seconds(k) for k in (0, 1, 3, 4)], rel=0.02)
    for k in (2, 5):  # not measured: a guess that leans low, and so is tried
        assert costs.relative(k - 1) < costs.relative(k) <= seconds(k)


def test_each_width_is_priced_as_measured_where_a_line_would_miss_a_cliff():
    """A 4-bit verify: 1 draft 1.10, 2 drafts 1.41, 4 drafts 2.04, 8 drafts 2.15 single-row forwards."""
    verify = {0: 1.0, 1: 1.10, 2: 1.41, 4: 2.04, 8: 2.15}
    costs = Costs()
    for k in [0, 1, 0, 2, 0, 4, 0, 8] * 3 + [4, 1, 8, 2]:
        costs.update(verify[k] + k * STEP, steps=k, drafted=k, draft_s=k * STEP)
    assert [costs.verify(k) for k in verify] == pytest.approx(list(verify.values()), rel=0.01)
    assert costs.verify(3) <= 1.41 + costs.width  # between two measured: leaning low, so it is tried
    estimate = costs.estimate()
    assert dict(estimate.widths) == pytest.approx({k: v for k, v in verify.items() if k}, rel=0.01)
    assert estimate.verify_s(5) == pytest.approx(2.04, rel=0.01)  # rows: four drafts and the last token


def test_one_draft_size_leaves_the_verify_shape_unmeasured():
    costs = Costs()
    feed(costs, [3] * 10)
    assert costs.shape is None and costs.step == pytest.approx(STEP / costs.base, rel=0.05)


def test_a_drift_moves_the_base_not_the_ratios():
    costs = Costs()
    feed(costs, [4, 0, 2, 1] * 8)
    before = [costs.relative(k) for k in range(6)]
    feed(costs, [4] * 20, scale=2.0, split_every=8)  # the machine halves its speed while drafting 4
    assert costs.estimate().base_s == pytest.approx(2.0, rel=0.05)
    assert [costs.relative(k) for k in range(6)] == pytest.approx(before, rel=0.03)


def test_noise_costs_a_few_percent_not_the_shape():
    import random

    rng = random.Random(0)
    costs = Costs()
    for k in [4, 0, 1, 3, 2] * 20:
        noisy = seconds(k) * rng.uniform(0.95, 1.05)
        costs.update(noisy, steps=k, drafted=k, draft_s=STEP * k * rng.uniform(0.95, 1.05) if k else None)
    assert [costs.relative(k) for k in range(6)] == pytest.approx([seconds(k) for k in range(6)], rel=0.06)


def test_looked_up_drafts_take_no_drafter_step():
    costs = Costs()
    for _ in range(10):
        costs.update(seconds(3), steps=3, drafted=3, draft_s=3 * STEP)
        costs.update(BASE + JUMP + 6 * WIDTH, steps=0, drafted=6)  # a six-token copy from the context
        costs.update(BASE, steps=0, drafted=0)
    assert costs.estimate().width_s == pytest.approx(WIDTH, rel=0.1)
    assert costs.estimate().jump_s == pytest.approx(JUMP, rel=0.1)


def test_a_probe_costs_a_drafter_step_at_least_once_drafting_timed_one():
    """A cheap head's probe hides in a plain round's noise: measured free, it would be asked every round."""
    costs = Costs()
    for plain in (1.0, 1.02, 0.97):
        costs.update(plain, steps=0, drafted=0)
        costs.probed(0.99)  # no slower than a plain round
    assert costs.probe == 0.0
    feed(costs, [0, 1, 0, 2] * 3)  # drafting rounds, timed apart: a step is 0.3
    assert costs.step == pytest.approx(STEP, rel=0.02) and costs.probe == costs.step
