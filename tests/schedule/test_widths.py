"""The small set of draft lengths."""

from specmlx.schedule.widths import COPIED, WIDTHS, cut, widest, within


def test_widest_is_the_longest_length_of_the_set_within_a_limit():
    assert [widest(n) for n in range(-1, 10)] == [0, 0, 1, 2, 3, 4, 4, 6, 6, 8, 8]
    assert widest(100) == WIDTHS[-1]
    assert within(5) == (0, 1, 2, 3, 4)


def test_a_copy_is_cut_to_a_length_of_the_set():
    assert cut(list(range(7))) == list(range(6)) and cut(list(range(3))) == [0, 1, 2] and cut([]) == []
    assert len(cut(list(range(15)))) == 12 and len(cut(list(range(40)))) == 16
    assert all(len(cut(list(range(n)))) in COPIED for n in range(40))


def test_a_block_drafters_set_reaches_its_whole_block_and_no_other_drafters_does():
    """A block of 16 proposes 15 for one forward: its set goes on past 8, to 12 and 15."""
    assert within(16, blocks=True) == WIDTHS + (12, 15) and within(16) == WIDTHS
    assert [widest(n, blocks=True) for n in (8, 11, 12, 14, 15, 40)] == [8, 8, 12, 12, 15, 15]
    assert widest(15) == 8
