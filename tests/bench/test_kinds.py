"""Figures per kind of prompt: tokens per round and × the target alone on the kind's own prompts."""

from __future__ import annotations

import pytest

from specmlx.bench.kinds import KindRow, by_kind, kinds_table

from .test_summary import measure

KINDS = {"t1": "tool-call", "t2": "tool-call", "p1": "prose"}


@pytest.fixture
def measurements():
    return [
        measure("target", "t1", range(10), 1.0, 10), measure("target", "t2", range(10), 3.0, 10),
        measure("target", "p1", range(30), 3.0, 30),
        # tool calls: 20 tokens in 2 s of decode over 5 rounds; prose: 30 tokens in 2 s over 15 rounds
        measure("specmlx", "t1", range(10), 0.5, 2, 8, 8), measure("specmlx", "t2", range(10), 1.5, 3, 12, 7),
        measure("specmlx", "p1", range(30), 2.0, 15, 60, 15),
    ]


def test_each_kind_gets_its_tokens_per_round_and_its_speedup_over_the_target_on_its_prompts(measurements):
    rows = {(r.mode, r.kind): r for r in by_kind(measurements, KINDS)}
    assert list(rows) == [("target", "tool-call"), ("target", "prose"), ("specmlx", "tool-call"),
                          ("specmlx", "prose")]  # the main table's order, kinds as first seen
    tool, prose = rows["specmlx", "tool-call"], rows["specmlx", "prose"]
    # tool calls: (8 + 2) + (7 + 3) = 20 tokens over 5 rounds; 20 / 2 s against the target's 20 / 4 s
    assert (tool.prompts, tool.tokens, tool.mean_accepted, tool.speedup) == (2, 20, 4.0, pytest.approx(2.0))
    # prose: 15 + 15 = 30 tokens over 15 rounds; 30 / 2 s against the target's 30 / 3 s
    assert (prose.prompts, prose.tokens, prose.mean_accepted, prose.speedup) == (1, 30, 2.0, pytest.approx(1.5))
    assert rows["target", "prose"].speedup is None and rows["target", "prose"].mean_accepted == 1.0
    table = kinds_table(list(rows.values())).splitlines()
    assert len(table) == 2 + 4 and "| specmlx | d | 0 | 2 | tool-call | 2 | 20 | 4.00 | 2.00× |" in table
    assert KindRow(**tool.to_dict()) == tool


def test_a_single_kind_gets_no_table(measurements):
    one = {prompt: "code" for prompt in KINDS}
    assert by_kind(measurements, one) == [] and kinds_table(by_kind(measurements, one)) == ""
