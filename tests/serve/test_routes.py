"""The server through OpenAI's own client: chat and completions, streamed and not, and exactness."""

from __future__ import annotations

import json

import pytest

from specmlx.generate import main as generate_main

from .conftest import MODEL

PROMPT = "def add(a, b):"
DRAFTERS = ["drafter", "mtp", "ngram", "none"]


def spec(**fields) -> dict:
    return {"speculative": fields}


def cli_tokens(capsys, served_dirs, drafter: str, max_tokens: int, *extra: str) -> dict:
    """What `specmlx generate --chat --json` writes for PROMPT with this drafter."""
    choice = str(served_dirs[drafter]) if drafter in served_dirs else drafter
    code = generate_main(["--target", str(served_dirs["target"]), "--drafter", choice, "--chat", "--prompt", PROMPT,
                          "--max-tokens", str(max_tokens), "--json", *extra])
    assert code == 0
    return json.loads(capsys.readouterr().out)


def test_the_model_list_names_the_target_and_its_drafters(client):
    models = client.models.list().data
    assert [m.id for m in models] == [MODEL]
    assert models[0].drafters == DRAFTERS
    assert client.models.retrieve(MODEL).default_drafter == "drafter"


@pytest.mark.parametrize("drafter", DRAFTERS)
def test_greedy_chat_equals_specmlx_generate_and_the_target_alone(client, capsys, served_dirs, drafter):
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": PROMPT}], max_tokens=24, temperature=0,
        extra_body=spec(drafter=drafter, sources=True))
    cli = cli_tokens(capsys, served_dirs, drafter, 24)
    alone = cli_tokens(capsys, served_dirs, "none", 24)
    assert reply.speculative["tokens"] == cli["tokens"] == alone["tokens"]
    assert reply.choices[0].message.content == cli["text"]
    assert reply.speculative["drafter"] == drafter
    assert reply.usage.completion_tokens == len(cli["tokens"]) == 24
    assert reply.choices[0].finish_reason == "length"


def test_a_streamed_chat_carries_the_same_text_then_its_usage(client):
    messages = [{"role": "user", "content": "for i in range"}]
    whole = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=20, temperature=0)
    chunks = list(client.chat.completions.create(model=MODEL, messages=messages, max_tokens=20, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishing = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finishing] == ["length"]
    assert finishing[0].speculative["rounds"] >= 1
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 20
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_a_stream_can_carry_each_tokens_source(client):
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": PROMPT}], max_tokens=30, temperature=0, stream=True,
        extra_body=spec(sources=True, num_draft=3)))
    pieces = chunks[1:-1]  # between the role and the finishing chunk
    sources = [s for c in pieces for s in c.speculative["sources"]]
    stats = next(c.speculative for c in chunks if c.choices and c.choices[0].finish_reason)
    assert len(sources) == 30
    assert set(sources) <= {"draft", "corrected", "bonus", "target"}
    assert sources.count("draft") == stats["accepted"]
    assert stats["num_draft"] == 3
    assert stats["mean_accepted_length"] == pytest.approx((stats["accepted"] + stats["rounds"]) / stats["rounds"], abs=1e-3)


def test_the_target_alone_reports_no_draft_length(client):
    """Drafter none drafts nothing: 0, whatever length the server or request would draft with another."""
    for fields in ({"drafter": "none"}, {"drafter": "none", "num_draft": 3}):
        reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": PROMPT}],
                                               max_tokens=6, extra_body=spec(**fields))
        assert reply.speculative["num_draft"] == 0 and reply.speculative["drafted"] == 0
    looked_up = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": PROMPT}],
                                               max_tokens=6, extra_body=spec(drafter="none", lookup=2, num_draft=3))
    assert looked_up.speculative["num_draft"] == 3  # prompt lookup still proposes


def test_each_reply_says_the_mean_draft_length_it_chose(client):
    """A model drafter drafts what a round chose, so the mean chosen is drafted per round; none chooses 0."""
    def stats(**fields) -> dict:
        return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": PROMPT}],
                                              max_tokens=20, temperature=0, extra_body=spec(**fields)).speculative

    for fields in ({"num_draft": 3}, {"auto": True}):
        s = stats(drafter="drafter", **fields)
        assert s["mean_num_draft"] == pytest.approx(s["drafted"] / s["rounds"], abs=1e-4)
    assert 0 < stats(drafter="drafter", num_draft=3)["mean_num_draft"] <= 3
    assert stats(drafter="none")["mean_num_draft"] == 0


def test_completions_take_text_or_token_ids_and_stream(client, tokenizer):
    text = client.completions.create(model=MODEL, prompt="import numpy", max_tokens=12, temperature=0)
    ids = client.completions.create(model=MODEL, prompt=tokenizer.encode("import numpy"), max_tokens=12,
                                    temperature=0)
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt="import numpy", max_tokens=12, temperature=0, stream=True) if c.choices)
    assert text.object == "text_completion"
    assert text.choices[0].text == ids.choices[0].text == streamed
    assert text.usage.completion_tokens == 12


def test_a_seeded_sampled_request_repeats_exactly_and_another_seed_differs(client):
    def sample(seed: int) -> str:
        return client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "The quick brown"}], max_tokens=32,
            temperature=0.7, seed=seed).choices[0].message.content

    first = sample(7)
    assert sample(7) == first
    assert any(sample(seed) != first for seed in (8, 9, 10))


def test_stop_strings_end_the_answer_before_them(client):
    full = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=24, temperature=0).choices[0].text
    cut = full[len(full) // 2 : len(full) // 2 + 3]
    assert cut and cut in full
    stopped = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=24, temperature=0, stop=[cut])
    assert stopped.choices[0].text == full[: full.index(cut)]
    assert stopped.choices[0].finish_reason == "stop"


def test_a_conversations_next_turn_is_prefilled_only_past_what_its_slot_holds(loaded):
    """On a server of its own: which slot a new conversation takes depends on what the
    slots already hold, so another test's requests must not be there first."""
    from openai import OpenAI

    from .conftest import start

    background, _ = start(loaded)
    with background as url, OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60) as client:
        check_turns(client)


def check_turns(client) -> None:
    def turn(history: list[dict]) -> tuple[str, int, int]:
        reply = client.chat.completions.create(model=MODEL, messages=history, max_tokens=8, temperature=0)
        return (reply.choices[0].message.content, reply.usage.prompt_tokens,
                reply.usage.prompt_tokens_details.cached_tokens)

    a = [{"role": "user", "content": "def add(a, b):" * 3}]
    b = [{"role": "system", "content": "naïve café"}, {"role": "user", "content": "for i in range(10):" * 3}]
    a_text, a_prompt, _ = turn(a)
    b_text, b_prompt, _ = turn(b)
    # Two clients taking turns: each continues in its own slot.
    _, _, a_cached = turn(a + [{"role": "assistant", "content": a_text}, {"role": "user", "content": "and sub"}])
    _, _, b_cached = turn(b + [{"role": "assistant", "content": b_text}, {"role": "user", "content": "and"}])
    assert a_cached >= a_prompt
    assert b_cached >= b_prompt


def test_a_stopped_server_leaves_nothing_holding_its_models(served_dirs):
    """A test module, or the bench, loads the next pair after a server is gone: its weights must be free."""
    import gc
    import weakref

    import httpx

    from specmlx.loading import load_models
    from specmlx.mlx_thread import MLXThread

    from .conftest import start

    mlx = MLXThread()
    loaded = mlx.call(load_models, str(served_dirs["target"]), [str(served_dirs["drafter"])])
    held = [mlx, loaded.target, {d.name: d for d in loaded.drafters}]
    weights = weakref.ref(loaded.target.model)
    del loaded
    background, worker = start(held)
    with background as url:
        assert httpx.post(url + "/v1/chat/completions", timeout=60, json={
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).status_code == 200
    del background, worker
    mlx.close()
    held.clear()
    gc.collect()
    assert weights() is None


def test_prompts_are_encoded_off_the_event_loop_and_one_past_the_window_only_in_part(loaded, tokenizer):
    """A long prompt takes seconds to encode: on the event loop it would stall every stream and /health."""
    import dataclasses
    import threading

    import httpx

    from .conftest import start

    class Spy:
        def __init__(self, inner) -> None:
            self.inner, self.calls = inner, []

        def encode(self, text, **kw):
            self.calls.append(("encode", len(text), threading.current_thread().name))
            return self.inner.encode(text, **kw)

        def apply_chat_template(self, *args, **kw):
            self.calls.append(("template", 0, threading.current_thread().name))
            return self.inner.apply_chat_template(*args, **kw)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    background, _ = start(loaded, max_body_bytes=4 << 20)
    app = background.server.config.app
    spy = Spy(app.state.serving.tokenizer)
    app.state.serving = dataclasses.replace(app.state.serving, tokenizer=spy)
    window = app.state.serving.context_window
    with background as url:
        long = "word " * (3 * window)
        r = httpx.post(url + "/v1/chat/completions", timeout=60,
                       json={"model": MODEL, "messages": [{"role": "user", "content": long}]})
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        r = httpx.post(url + "/v1/completions", timeout=60, json={"model": MODEL, "prompt": long, "max_tokens": 2})
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        r = httpx.post(url + "/v1/completions", timeout=60, json={"model": MODEL, "prompt": "def", "max_tokens": 2})
        assert r.status_code == 200
        r = httpx.post(url + "/v1/chat/completions", timeout=60,
                       json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert r.status_code == 200
    loop_thread = background.thread.name
    assert {kind for kind, _, _ in spy.calls} == {"encode", "template"}
    assert all(thread != loop_thread for _, _, thread in spy.calls), spy.calls
    assert max(size for _, size, _ in spy.calls) < len(long)  # the long prompt was never encoded whole


CHAT_TEXT = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"  # the tiny chat template's own prompt for "hi"


def test_a_completion_keeps_its_answers_leading_space_where_a_chat_drops_it(client, loaded):
    """The tiny target answers "hi" with a space first: as a completion the text keeps it, whole and
    streamed, and a stop string can match it; as a chat's answer the same tokens' text drops it."""
    served = loaded[1].tokenizer
    whole = client.completions.create(model=MODEL, prompt=CHAT_TEXT, max_tokens=4, temperature=0,
                                      extra_body=spec(sources=True))
    prompt, tokens = served.encode(CHAT_TEXT), whole.speculative["tokens"]
    expected = served.decode(prompt + tokens)[len(served.decode(prompt)):]
    assert expected.startswith(" ") and not expected.startswith("  ")  # the answer this test is about
    assert whole.choices[0].text == expected
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt=CHAT_TEXT, max_tokens=4, temperature=0, stream=True) if c.choices)
    assert streamed == expected
    stopped = client.completions.create(model=MODEL, prompt=CHAT_TEXT, max_tokens=4, temperature=0,
                                        stop=[expected[:2]])
    assert stopped.choices[0].text == "" and stopped.choices[0].finish_reason == "stop"
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                                          temperature=0, extra_body=spec(sources=True))
    assert chat.speculative["tokens"] == tokens
    assert chat.choices[0].message.content == expected[1:]
