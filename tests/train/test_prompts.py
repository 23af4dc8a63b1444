"""Requests for the target to answer: generated, read from JSONL, split for holding out."""

import json

import pytest

from specmlx.errors import SpecmlxError
from specmlx.train.prompts import (HELD_OUT_EVERY, bench_prompt_files, generate_prompts, held_out,
                                   read_prompts)


def test_generated_requests_are_seeded_distinct_and_varied():
    first = generate_prompts(300, seed=3)
    assert first == generate_prompts(300, seed=3)
    assert first != generate_prompts(300, seed=4)
    assert len({r.prompt for r in first}) == 300
    kinds = {r.kind for r in first}
    assert {"code", "edit", "explain", "chat", "summarize", "math"} <= kinds
    assert any("```python\ndef " in r.prompt for r in first)  # real standard-library code is quoted


def test_generated_requests_never_repeat_the_bench_prompts():
    bench = {r.prompt for path in bench_prompt_files() for r in read_prompts(path)}
    assert len(bench) >= 16
    requests = generate_prompts(3000, seed=0, exclude=bench)
    assert not bench & {r.prompt for r in requests}
    # The exclusion is what keeps them out: asked to, the generator avoids any prompt it would make.
    again = generate_prompts(50, seed=0, exclude={r.prompt for r in requests[:10]})
    assert not {r.prompt for r in requests[:10]} & {r.prompt for r in again}


def test_every_nth_request_is_held_out():
    flags = [held_out(i) for i in range(HELD_OUT_EVERY * 3)]
    assert sum(flags) == 3 and flags[0]


def test_prompt_files_read_like_the_bench_and_refuse_bad_rows(tmp_path):
    good = tmp_path / "p.jsonl"
    good.write_text(json.dumps({"id": "a", "kind": "code", "prompt": "Write x."}) + "\n\n"
                    + json.dumps({"prompt": "Say y."}) + "\n")
    rows = read_prompts(good)
    assert [(r.id, r.kind, r.prompt) for r in rows] == [("a", "code", "Write x."), ("p3", "", "Say y.")]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "no prompt"}) + "\n")
    with pytest.raises(SpecmlxError, match=r"bad.jsonl:1: not a JSON object with a \"prompt\""):
        read_prompts(bad)
    with pytest.raises(SpecmlxError, match="missing.jsonl"):
        read_prompts(tmp_path / "missing.jsonl")
