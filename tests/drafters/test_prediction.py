"""Following a prediction: copy while the output agrees, realign after a divergence."""

from __future__ import annotations

from specmlx.drafters.prediction import REALIGN_MAX, REALIGN_MIN, Prediction

PROMPT = [900, 901]


def test_an_agreeing_output_is_followed_from_the_start():
    p = Prediction(range(10, 30), start=len(PROMPT))
    assert p.propose(PROMPT, 4) == [10, 11, 12, 13]
    assert p.propose(PROMPT + [10, 11], 4) == [12, 13, 14, 15]  # two accepted, then more
    assert p.propose(PROMPT + list(range(10, 28)), 4) == [28, 29]  # never past its end
    assert p.propose(PROMPT + list(range(10, 30)), 4) == []


def test_after_a_divergence_it_realigns_on_the_outputs_tail():
    prediction = list(range(10, 30))
    p = Prediction(prediction, start=len(PROMPT))
    out = PROMPT + [10, 11, 12]
    assert p.propose(out, 3) == [13, 14, 15]
    out += [77, 78]  # the edit: new text
    assert p.propose(out, 3) == []  # lost: its tail is nowhere in the prediction
    out += [16, 17]
    assert p.propose(out, 3) == []  # two tokens are not enough to realign
    out += [18]
    assert p.propose(out, 3) == [19, 20, 21]  # the old text again, past the edit
    assert p.at == 9


def test_a_replaced_token_realigns_as_soon_as_the_tail_matches():
    p = Prediction([1, 2, 3, 4, 5, 6, 7, 8], start=0)
    assert p.propose([1, 2, 9, 4, 5, 6], 2) == [7, 8]


def test_the_longest_match_wins_then_the_nearest_after_the_last_agreement():
    # "a b c" ends at 3, 8 and 13; only the one at 13 is preceded by "x" as the output is.
    a, b, c, x = 1, 2, 3, 4
    prediction = [a, b, c, 50, 51, a, b, c, 52, 53, x, a, b, c, 54, 55]
    p = Prediction(prediction, start=0)
    assert p.propose([99, x, a, b, c], 2) == [54, 55]
    # Equal lengths: the nearest match at or after where the output last agreed.
    p = Prediction(prediction, start=0)
    assert p.propose([a, b, c, 50, 51], 1) == [a]  # agreed up to index 5
    assert p.propose([a, b, c, 50, 51, 98, a, b, c], 1) == [52]  # the match ending at 8, not 3 or 13
    # None at or after it: the nearest before.
    p = Prediction(prediction, start=0)
    p.propose(prediction[:15], 1)
    assert p.propose(prediction[:15] + [97, a, b, c], 1) == [54]


def test_short_outputs_and_empty_predictions_propose_nothing():
    assert Prediction([], start=0).propose([1, 2, 3], 4) == []
    p = Prediction([5, 6, 7, 8], start=0)
    assert p.propose([9] * (REALIGN_MIN - 1), 4) == []
    assert p.propose([9] * (REALIGN_MIN - 1), 0) == []


def test_a_match_counts_at_most_realign_max_tokens():
    """Two places whose tails agree past REALIGN_MAX tie on length; the nearer one wins."""
    body = list(range(100, 100 + REALIGN_MAX + 4))
    prediction = body + [1] + body + [2]
    p = Prediction(prediction, start=0)
    p.propose(prediction[:3], 1)  # agreed near the start
    assert p.propose([9] + body, 1) == [1]  # both match all REALIGN_MAX; the first is nearer


def test_the_prompt_is_never_matched_only_the_output():
    p = Prediction([5, 6, 7, 8, 9], start=4)
    # The prompt ends with 5 6 7, but the output has not begun: the prediction starts from its first token.
    assert p.propose([1, 5, 6, 7], 2) == [5, 6]
    assert p.propose([1, 5, 6, 7, 0, 0], 2) == []  # the output's tail "7 0 0" is nowhere


def test_asked_twice_it_proposes_the_same():
    p = Prediction([1, 2, 3, 4, 5, 6, 7, 8], start=0)
    assert p.propose([1, 2, 9, 4, 5, 6], 2) == [7, 8]
    assert p.propose([1, 2, 9, 4, 5, 6], 2) == [7, 8]  # a round retried: nothing moved
    assert p.hint == 2
