"""Settings validate like the engine does and pick the drafter."""

import pytest

from app.settings import ChatSettings
from specmlx.policy import DraftPolicy
from specmlx.errors import SpecmlxError


def test_bad_values_are_one_line_errors():
    with pytest.raises(SpecmlxError, match="top-p"):
        ChatSettings(top_p=0)
    with pytest.raises(SpecmlxError, match="draft tokens"):
        ChatSettings(policy=DraftPolicy(num_draft=-1))


def test_speculation_off_means_no_drafter_but_keeps_the_choice():
    settings = ChatSettings(drafter="ngram", speculation=False, temp=0.5, policy=DraftPolicy(num_draft=3))
    assert settings.active_drafter == "none" and settings.drafter == "ngram"
    config = settings.generation_config(stop=("x",))
    assert (config.sampling.temp, config.policy.num_draft, config.stop) == (0.5, 3, ("x",))


def test_the_draft_length_is_automatic_unless_one_is_chosen():
    assert ChatSettings().generation_config().policy.auto and ChatSettings().draft_label == "auto"
    fixed = ChatSettings(policy=DraftPolicy(num_draft=4))
    assert not fixed.generation_config().policy.auto and fixed.draft_label == "4"


def test_the_draft_field_reads_the_draft_policy_grammar_and_keeps_only_a_length():
    from app.settings import read_policy

    lengths = (read_policy("6"), read_policy(" Auto "), read_policy("k=2"))
    assert lengths == (DraftPolicy(num_draft=6), DraftPolicy(num_draft=None), DraftPolicy(num_draft=2))
    with pytest.raises(SpecmlxError, match='^draft policy "lots": unknown part lots'):
        read_policy("lots")
    with pytest.raises(SpecmlxError, match='^draft policy "4\\+adaptive": a chat sets only the draft length'):
        read_policy("4+adaptive")  # refused, not dropped
    assert ChatSettings(policy=DraftPolicy(num_draft=None)).draft_label == "auto"
    assert ChatSettings(policy=DraftPolicy(num_draft=0)).draft_label == "0"
