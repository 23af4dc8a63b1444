"""The batch's draft lengths (`schedule.load.choose`) against what is known of them.

Verify costs are the whole batch's forward over n positions, in plain rounds:
`GENTLE` is about this CPU's (a jump from the matrix-vector path to the
matrix-matrix one, then 5% a position), `STEEP` a machine that one row
already fills. The cases with an answer by hand say why in their docstring.
"""

from __future__ import annotations

import itertools

import pytest

from specmlx.schedule.auto import _argmax
from specmlx.schedule.load import Lane, choose
from specmlx.schedule.widths import within
from tests.costs import FixedCosts

CAP = 8


def GENTLE(n: int) -> float:
    return 1 + 0.3 * (n > 1) + 0.05 * (n - 1)


def STEEP(n: int) -> float:
    return 1 + 0.3 * (n > 1) + 0.2 * (n - 1)


def NO_JUMP(n: int) -> float:
    return 1 + 0.1 * (n - 1)


def lanes(rate: float, rows: int, step: float = 0.02) -> list[Lane]:
    return [Lane((rate,) * CAP, CAP, step)] * rows


def mean(ks: list[int]) -> float:
    return sum(ks) / len(ks)


RATES = [(a,) * CAP for a in (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99, 1.0)] + [
    (0.9, 0.8, 0.6, 0.4, 0.3, 0.2, 0.1, 0.05),  # a drafter that tires
    (0.3, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9),  # one that is unsure of its first token only
]


def test_one_lane_chooses_what_the_automatic_length_alone_chooses():
    """With one row the batch's choice is `auto.py`'s: the same k for every acceptance and cost."""
    chosen, differ = set(), []
    for rates, step, width, jump, cap in itertools.product(RATES, (0.0, 0.01, 0.05, 0.2, 0.5),
                                                           (0.0, 0.02, 0.1, 0.3), (0.0, 0.3), (0, 1, 4, CAP)):
        costs = FixedCosts(step, width, jump)
        alone = _argmax(list(rates), costs, cap)
        chosen.add(alone)
        if choose([Lane(rates, cap, step)], lambda n: costs.verify(n - 1)) != [alone]:
            differ.append((rates[:2], step, width, jump, cap, alone))
    assert not differ
    assert chosen == set(within(CAP))  # the grid reaches every length of the set


@pytest.mark.parametrize("verify", [GENTLE, STEEP, NO_JUMP])
@pytest.mark.parametrize("step", [0.0, 0.02, 0.1])
@pytest.mark.parametrize("rate", [0.3, 0.5, 0.7, 0.9, 0.99])
def test_a_fuller_batch_never_drafts_more(rate, step, verify):
    """From two rows on (one row alone may save the jump that two pay anyway, below)."""
    means = [mean(choose(lanes(rate, rows, step), verify)) for rows in range(1, 49)]
    start = 0 if verify is NO_JUMP else 1
    assert all(b <= a for a, b in zip(means[start:], means[start + 1 :])), means


@pytest.mark.parametrize("verify", [GENTLE, STEEP, NO_JUMP])
@pytest.mark.parametrize("rate", [0.5, 0.7, 0.9])
def test_a_full_enough_batch_drafts_nothing(rate, verify):
    """Each scored position costs the same, so with enough rows a drafted token, accepted with
    chance < 1, costs more than the plain token of a row it could have been."""
    assert mean(choose(lanes(rate, 1), verify)) > 0
    assert choose(lanes(rate, 64), verify) == [0] * 64


def test_two_rows_pay_the_jump_that_one_row_saves():
    """a = 0.3, free drafting, GENTLE. One row: k = 0 costs 1 round for 1 token; k = 2 costs
    1.4 for 1.39 tokens. Two rows pay the jump whatever they do: k = 0 gives 2 tokens for 1.35,
    k = 1 each 2.6 for 1.45 (1.79 a round), so both draft."""
    assert choose(lanes(0.3, 1, step=0.0), GENTLE) == [0]
    assert all(k > 0 for k in choose(lanes(0.3, 2, step=0.0), GENTLE))


def test_a_fixed_lane_keeps_its_length_and_the_others_fill_its_width():
    """A request that fixed its length keeps it; the width it forces is paid anyway, so the
    automatic rows beside it draft at least as much as beside a plain row. By hand, a = 0.5,
    free drafting, STEEP: alone, k = 2 (1.75 tokens for 1.7 rounds; 0 and 1 give 1 a round);
    beside a row fixed at 6, any k up to 6 costs the same 14 positions, so it drafts 6."""
    for verify, rate in itertools.product((GENTLE, STEEP), (0.5, 0.7, 0.9)):
        beside = {}
        for fixed in (0, 2, 6):
            ks = choose([*lanes(rate, 1), Lane((), 0, 0.0, fixed=fixed), *lanes(rate, 1)], verify)
            assert ks[1] == fixed
            beside[fixed] = ks[0]
        assert beside[0] <= beside[2] <= beside[6], (verify.__name__, rate, beside)
    assert choose(lanes(0.5, 1, step=0.0), STEEP) == [2]
    assert choose([*lanes(0.5, 1, step=0.0), Lane((), 0, 0.0, fixed=6)], STEEP) == [6, 6]


@pytest.mark.parametrize("c, ks", [(0.5, [0, 0]), (0.1, [8, 0])])
def test_the_padding_of_a_wide_row_is_counted(c, ks):
    """Row A's drafts are always accepted, row B's never; drafting costs 0.01, a position
    c (verify = 1 + c (n - 1)). B drafts nothing useful, so A's k decides: 2 + k tokens for
    1 + c (1 + 2 k) + 0.01 k, both rows padded to 1 + k. The ratio grows with k iff
    3 c < 0.98: c = 0.5 drafts none (8 would give 10 tokens for 9.58 rounds,
    none 2 for 1.5); c = 0.1 drafts all 8. Counting only real positions, 2 + k, c = 0.5
    would draft 8 (10 for 5.58 rounds), as A alone does."""
    a, b = Lane((1.0,) * CAP, CAP, 0.01), Lane((0.0,) * CAP, CAP, 0.01)
    verify = lambda n: 1 + c * (n - 1)  # noqa: E731
    assert choose([a, b], verify) == ks
    assert choose([a], verify) == [8]
    assert choose([b], verify) == [0]


def test_a_block_drafters_rows_verify_past_eight_and_other_rows_do_not():
    """Two rows right 95% of the time, forwards nearly flat in their rows (a GPU's): block rows draft
    their whole block (15), rows of a token a step stop at 8, their set's last."""
    flat = lambda n: 1.0 + 0.01 * n  # noqa: E731
    assert choose([Lane((0.95,) * 15, 15, 0.05, blocks=True)] * 2, flat) == [15, 15]
    assert choose([Lane((0.95,) * 15, 15, 0.05)] * 2, flat) == [8, 8]


def test_a_block_drafters_row_pays_one_step_for_its_draft():
    """A step as dear as 0.4 of a forward, right 85%: a row drafting a token a step drafts two at most
    beside another; a block drafter's row (one step whatever it drafts) drafts wider, and more tokens
    come of the round for the same rows."""
    stepwise = choose([Lane((0.85,) * CAP, CAP, 0.4)] * 2, GENTLE)
    blocks = choose([Lane((0.85,) * CAP, CAP, 0.4, blocks=True)] * 2, GENTLE)
    assert max(stepwise) <= 2 < min(blocks)
    assert Lane((), 0, 0.4, blocks=True).steps(6) == 1 and Lane((), 0, 0.4).steps(6) == 6
