"""Requests for the target to answer: generated, split for holding out (files: tests/test_prompting.py)."""

from specmlx.prompting import read_prompts
from specmlx.train.prompts import HELD_OUT_EVERY, bench_prompt_files, generate_prompts, held_out


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
