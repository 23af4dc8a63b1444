"""Requests for the target to answer: generated, split for holding out, never a bench prompt."""

import pytest

from specmlx import paths
from specmlx.prompting import packaged_prompts_path, read_prompts
from specmlx.train.prompts import HELD_OUT_EVERY, generate_prompts, held_out, left_out


def test_generated_requests_are_seeded_distinct_and_varied():
    first = generate_prompts(300, seed=3)
    assert first == generate_prompts(300, seed=3)
    assert first != generate_prompts(300, seed=4)
    assert len({r.prompt for r in first}) == 300
    kinds = {r.kind for r in first}
    assert {"code", "edit", "explain", "chat", "summarize", "math"} <= kinds
    assert any("```python\ndef " in r.prompt for r in first)  # real standard-library code is quoted


def test_what_is_left_out_is_the_packaged_prompt_set():
    assert left_out() == {r.prompt for r in read_prompts(packaged_prompts_path())}
    assert len(left_out()) >= 16


def test_generated_requests_never_repeat_the_bench_prompts():
    requests = generate_prompts(3000, seed=0, exclude=left_out())
    assert not left_out() & {r.prompt for r in requests}
    # The exclusion is what keeps them out: asked to, the generator avoids any prompt it would make.
    again = generate_prompts(50, seed=0, exclude={r.prompt for r in requests[:10]})
    assert not {r.prompt for r in requests[:10]} & {r.prompt for r in again}


SHARED = (paths.checkout_root() or paths.PACKAGE_ROOT).parent / "shared" / "prompts" / "bench.jsonl"


@pytest.mark.skipif(not SHARED.exists(), reason="the shared bench set lives beside a checkout only")
def test_the_templates_alone_keep_out_the_shared_bench_set():
    # Not left out by name (a wheel has no such file), so the templates must never make one of its prompts.
    shared = {r.prompt for r in read_prompts(SHARED)}
    assert not shared & {r.prompt for r in generate_prompts(3000, seed=0, exclude=left_out())}


def test_every_nth_request_is_held_out():
    flags = [held_out(i) for i in range(HELD_OUT_EVERY * 3)]
    assert sum(flags) == 3 and flags[0]
