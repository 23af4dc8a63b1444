"""The clock's check on drafting: rounds that drafted, a window at a time, against plain rounds."""

from __future__ import annotations

from specmlx.schedule.realized import MARGIN, PLAIN, WINDOW, Realized


def judged(plain: list[float], drafting: list[tuple[float, int]]) -> list[bool]:
    realized = Realized()
    for seconds in plain:
        realized.plain_round(seconds)
    return [realized.drafting_round(seconds, tokens) for seconds, tokens in drafting]


def test_a_window_of_drafting_slower_a_token_than_plain_rounds_gives_a_verdict():
    verdicts = judged([1.0] * PLAIN, [(1.4, 1)] * WINDOW)
    assert verdicts == [False] * (WINDOW - 1) + [True]


def test_drafting_that_pays_or_loses_within_the_margin_does_not():
    assert not any(judged([1.0] * PLAIN, [(1.3, 2)] * WINDOW))  # 0.65 s a token: it pays
    assert not any(judged([1.0] * PLAIN, [((1.0 + MARGIN) * 0.99, 1)] * WINDOW))


def test_it_judges_only_once_it_has_seen_enough_plain_rounds():
    assert not any(judged([1.0] * (PLAIN - 1), [(2.0, 1)] * WINDOW))


def test_windows_do_not_overlap():
    """One verdict a window: judged after every round, a drafter right 80% of the time was given up
    by an unlucky window in one simulated answer of six."""
    verdicts = judged([1.0] * PLAIN, [(2.0, 1)] * (3 * WINDOW))
    assert [i for i, v in enumerate(verdicts) if v] == [WINDOW - 1, 2 * WINDOW - 1, 3 * WINDOW - 1]


def test_plain_rounds_are_the_last_few():
    """A machine that sped up since: the old plain rounds are out of the window."""
    assert any(judged([3.0] * WINDOW + [1.0] * WINDOW, [(1.4, 1)] * WINDOW))
