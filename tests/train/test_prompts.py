"""Requests for the target to answer: generated, split for holding out, never a bench prompt."""

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


def test_the_templates_alone_never_make_a_bench_prompt():
    # The exclusion above is a second guard: the templates themselves never write one of the bench's prompts.
    assert not left_out() & {r.prompt for r in generate_prompts(3000, seed=0)}


def test_every_nth_request_is_held_out():
    flags = [held_out(i) for i in range(HELD_OUT_EVERY * 3)]
    assert sum(flags) == 3 and flags[0]


def test_requests_are_asked_as_people_ask():
    from specmlx.train.prompts import HOW_TO, SNIPPET_ASKS, TASKS_IN_WORDS

    prompts = [r.prompt for r in generate_prompts(400, seed=0, exclude=left_out())]
    # Tasks in plain words, how-to questions, natural asks about real code, and real paragraphs to summarize.
    assert sum(any(task in p for task in TASKS_IN_WORDS) for p in prompts) > 40
    assert sum(any(how in p for how in HOW_TO) for p in prompts) > 15
    assert sum(any(p.startswith(ask.split("{")[0]) for _, ask in SNIPPET_ASKS) for p in prompts) > 15
    assert sum(p.startswith(("TL;DR", "Summarize in", "Explain this in plain")) and len(p) > 220 for p in prompts) > 10
