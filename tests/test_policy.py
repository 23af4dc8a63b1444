"""`DraftPolicy`'s grammar: every form parses and writes back, and bad input is one line naming its part."""

from __future__ import annotations

import pytest

from specmlx.errors import SpecmlxError
from specmlx.policy import START_DRAFT, DraftPolicy


@pytest.mark.parametrize("text, policy", [
    ("auto", DraftPolicy(num_draft=None)),
    ("4", DraftPolicy()),
    ("0", DraftPolicy(num_draft=0)),
    ("k=6", DraftPolicy(num_draft=6)),
    ("adaptive", DraftPolicy(adaptive=True)),
    ("4+adaptive+pmin=0.5", DraftPolicy(num_draft=4, adaptive=True, p_min=0.5)),
    ("pmin=0.5+4+adaptive", DraftPolicy(num_draft=4, adaptive=True, p_min=0.5)),
    ("auto+max=20", DraftPolicy(num_draft=None, max_draft=20)),
    ("2+lookup=3+lookup-draft=5", DraftPolicy(num_draft=2, lookup=3, lookup_draft=5)),
    (" Auto + LOOKUP=2 ", DraftPolicy(num_draft=None, lookup=2)),
    ("pmin=1e-3", DraftPolicy(p_min=0.001)),
])
def test_every_form_parses_to_its_policy(text, policy):
    assert DraftPolicy.parse(text) == policy


@pytest.mark.parametrize("policy", [
    DraftPolicy(), DraftPolicy(num_draft=None), DraftPolicy(num_draft=0), DraftPolicy(num_draft=7, adaptive=True),
    DraftPolicy(num_draft=None, max_draft=20, p_min=0.25, lookup=8, lookup_draft=1),
    DraftPolicy(num_draft=3, max_draft=5, adaptive=True, p_min=0.1 + 0.2, lookup=2, lookup_draft=16),
])
def test_str_writes_a_text_that_parses_back_to_the_same_policy(policy):
    assert DraftPolicy.parse(str(policy)) == policy


def test_str_names_the_length_first_and_only_what_is_not_a_default():
    assert str(DraftPolicy()) == str(START_DRAFT)
    assert str(DraftPolicy(num_draft=None)) == "auto"
    assert str(DraftPolicy(num_draft=6, adaptive=True, p_min=0.5)) == "6+adaptive+pmin=0.5"
    assert str(DraftPolicy(lookup=3, lookup_draft=5, max_draft=9)) == "4+max=9+lookup=3+lookup-draft=5"


@pytest.mark.parametrize("text, line", [
    ("lots", 'draft policy "lots": unknown part lots; expected auto, a whole number N (or k=N), adaptive, max=N, '
             'pmin=P, lookup=N, lookup-draft=N or prediction-draft=N'),
    ("4+fast", 'draft policy "4+fast": unknown part fast; expected auto, a whole number N (or k=N), adaptive, '
               'max=N, pmin=P, lookup=N, lookup-draft=N or prediction-draft=N'),
    ("4++adaptive", 'draft policy "4++adaptive": an empty part; expected auto, a whole number N (or k=N), '
                    'adaptive, max=N, pmin=P, lookup=N, lookup-draft=N or prediction-draft=N, joined by +'),
    ("pmin=high", 'draft policy "pmin=high": pmin=high: pmin takes a number'),
    ("k=four", 'draft policy "k=four": k=four: k takes a whole number'),
    ("4+lookup=x", 'draft policy "4+lookup=x": lookup=x: lookup takes a whole number'),
    ("adaptive+adaptive", 'draft policy "adaptive+adaptive": adaptive is given twice'),
    ("auto+k=3", 'draft policy "auto+k=3": auto and k=3 both set the draft length: choose one'),
    ("4+6", 'draft policy "4+6": 4 and 6 both set the draft length: choose one'),
    ("pmin=0.1+pmin=0.2", 'draft policy "pmin=0.1+pmin=0.2": pmin=0.1 and pmin=0.2 both set the draft p-min: '
                          'choose one'),
    ("auto+adaptive", 'draft policy "auto+adaptive": auto and adaptive both set the draft length: choose one'),
    ("pmin=1", 'draft policy "pmin=1": draft p-min must be in [0, 1), got 1.0'),
    ("lookup=9", 'draft policy "lookup=9": lookup match length must be in 0..8 (0 turns it off), got 9'),
    ("-1", 'draft policy "-1": number of draft tokens must be >= 0, got -1'),
    ("max=0", 'draft policy "max=0": maximum draft length must be >= 1, got 0'),
])
def test_malformed_input_is_one_line_naming_the_bad_part(text, line):
    with pytest.raises(SpecmlxError) as refused:
        DraftPolicy.parse(text)
    assert str(refused.value) == line


def test_the_conflict_is_the_records_own_however_it_is_built():
    with pytest.raises(SpecmlxError, match="^auto and adaptive both set the draft length: choose one$"):
        DraftPolicy(num_draft=None, adaptive=True)


def test_on_a_base_the_named_parts_replace_its_fields_and_a_length_replaces_how_it_is_chosen():
    adaptive = DraftPolicy(num_draft=3, adaptive=True, lookup=2)
    assert DraftPolicy.parse("max=6", base=adaptive) == DraftPolicy(num_draft=3, adaptive=True, lookup=2, max_draft=6)
    assert DraftPolicy.parse("6", base=adaptive) == DraftPolicy(num_draft=6, lookup=2)
    assert DraftPolicy.parse("auto", base=adaptive) == DraftPolicy(num_draft=None, lookup=2)
    assert DraftPolicy.parse("6+adaptive", base=adaptive) == DraftPolicy(num_draft=6, adaptive=True, lookup=2)
    with pytest.raises(SpecmlxError, match="auto and adaptive both set the draft length"):
        DraftPolicy.parse("adaptive", base=DraftPolicy(num_draft=None))


def test_every_part_has_words_for_a_clash():
    from specmlx.policy import PARTS, WHAT

    assert {name for name, _ in PARTS.values()} <= set(WHAT)
    with pytest.raises(SpecmlxError, match="prediction-draft=4 and prediction-draft=5 both set the prediction draft"):
        DraftPolicy.parse("4+prediction-draft=4+prediction-draft=5")
