"""The stats panel's figures: sparkline on a fixed scale, speedup only when measured."""

from app.figures import Figures
from app.widgets.stats import accepted, sparkline, speedup


def test_sparkline_scale_is_zero_to_num_draft():
    assert sparkline([0, 2, 4], top=4, width=10) == "▁▅█"
    assert sparkline([4, 4, 4], top=4, width=2) == "██"  # the last rounds that fit
    assert sparkline([], top=4, width=10) == ""


def test_speedup_is_not_assumed():
    assert speedup(Figures(tps=30.0)) == "n/a — press ctrl+b\nto measure"
    assert speedup(Figures(tps=30.0, measuring=True)) == "measuring…"
    assert speedup(Figures(tps=30.0, baseline_tps=20.0)).startswith("1.50×")


def test_acceptance_says_when_nothing_was_drafted():
    assert accepted(Figures()) == "…"  # no answer yet
    assert accepted(Figures(tokens=5, draft="4")) == "…"  # streaming: known at the end
    assert accepted(Figures(tokens=5, draft="off")) == "no drafts"  # plain decoding
    assert accepted(Figures(tokens=5, draft="4", finished=True)) == "no drafts"  # prompt lookup found nothing
    assert accepted(Figures(tokens=5, acceptance=0.5, finished=True)) == "50%"
