"""Fill in the middle on /v1/completions: the prompt in the model's own FIM layout (on the real
Qwen2.5-Coder tokenizer, slow: fetched at first use), its end tokens, a model without FIM tokens, and
greedy answers through OpenAI's client equal to the engine's on the same prompt."""

from __future__ import annotations

import pytest

from specmlx.drafters import NGRAM, NONE
from specmlx.engine import Engine, GenerationConfig
from specmlx.serve.errors import APIError
from specmlx.serve.fim import find_layout
from specmlx.serve.openai.protocol import CompletionRequest
from specmlx.serve.prompts import HEAD_CHARS_PER_TOKEN, completion_prompt, infill_prompt

from .conftest import FIM_PREFIX as PREFIX
from .conftest import FIM_SUFFIX as SUFFIX
from .conftest import FIM_TOKENS as TOKENS
from .conftest import MODEL, on_thread, start
from .test_prompts import Counting

VOCAB = 151936  # Qwen2.5-Coder's embedding rows: what a token-id prompt is checked against


def request(prompt="x", **fields) -> CompletionRequest:
    return CompletionRequest(model=MODEL, prompt=prompt, **fields)


# ---- the real Qwen2.5-Coder tokenizer -------------------------------------------------------------


def literal(tokenizer, prefix: str, suffix: str) -> list[int]:
    """The FIM prompt written out as one text, its FIM tokens parsed as special tokens."""
    return [int(t) for t in tokenizer.encode(f"<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>")]


@pytest.mark.slow  # the `qwen` fixture fetches its tokenizer
@pytest.mark.parametrize("prefix,suffix", [(PREFIX, SUFFIX), ("", SUFFIX), (PREFIX, ""), ("", ""),
                                           ("naïve = '東京'  \n\t", "  # 🙂\r\n")])
def test_the_prompt_is_qwens_own_fim_layout(qwen, prefix, suffix):
    layout = find_layout(qwen)
    assert layout.name == "qwen" and layout.lead == ()  # Qwen adds no BOS to a text
    built = completion_prompt(qwen, request(prefix, suffix=suffix), VOCAB, 32768, layout)
    assert built == literal(qwen, prefix, suffix)
    assert completion_prompt(qwen, request([prefix], suffix=suffix), VOCAB, 32768, layout) == built


@pytest.mark.slow
def test_fim_tokens_written_in_the_code_stay_text(qwen):
    layout = find_layout(qwen)
    prefix = "MIDDLE = '<|fim_middle|>'  # and <|endoftext|>\n"
    built = completion_prompt(qwen, request(prefix, suffix="<|fim_suffix|>"), VOCAB, 32768, layout)
    assert built != literal(qwen, prefix, "<|fim_suffix|>")  # which parses them
    assert built[0] == layout.prefix and built[-1] == layout.middle
    assert built.count(layout.prefix) == built.count(layout.suffix) == built.count(layout.middle) == 1
    assert qwen.convert_tokens_to_ids("<|endoftext|>") not in built
    assert qwen.decode(built) == f"<|fim_prefix|>{prefix}<|fim_suffix|><|fim_suffix|><|fim_middle|>"


@pytest.mark.slow
def test_qwens_fim_answer_ends_at_its_end_of_text_and_at_every_fim_token(qwen):
    """Its end of text is an end token of the model already (config.json's eos_token_id); the others are not."""
    names = ["<|endoftext|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>", "<|fim_prefix|>",
             "<|fim_suffix|>", "<|fim_middle|>"]
    assert find_layout(qwen).stops == frozenset(qwen.convert_tokens_to_ids(names))


# ---- prompts, without a server ----------------------------------------------------------------------


def test_a_tokenizer_without_fim_tokens_has_no_layout(tokenizer):
    assert find_layout(tokenizer) is None
    with pytest.raises(APIError) as refused:
        completion_prompt(tokenizer, request(suffix=""), len(tokenizer))
    assert (refused.value.status, refused.value.code, refused.value.param) == (400, "unsupported_parameter", "suffix")
    assert refused.value.message.startswith("this model has no fill-in-the-middle tokens")
    assert completion_prompt(tokenizer, request("def f("), len(tokenizer)) == tokenizer.encode("def f(")


def test_a_suffix_needs_the_prompt_as_text(fim_tokenizer):
    layout = find_layout(fim_tokenizer)
    with pytest.raises(APIError) as refused:
        completion_prompt(fim_tokenizer, request([5, 6], suffix="x"), len(fim_tokenizer), None, layout)
    assert (refused.value.code, refused.value.param) == ("invalid_value", "prompt")
    empty = completion_prompt(fim_tokenizer, request([], suffix=""), len(fim_tokenizer), None, layout)
    assert empty == [layout.prefix, layout.suffix, layout.middle]  # an empty file: still a FIM request


def test_a_prefix_and_suffix_past_the_window_are_refused_from_a_head_of_them(fim_tokenizer):
    counting = Counting()
    huge = request("x" * 4000, suffix="y" * 5_000_000)
    with pytest.raises(APIError) as refused:
        infill_prompt(counting, huge, 1000, find_layout(fim_tokenizer))
    assert (refused.value.code, refused.value.param) == ("context_length_exceeded", "suffix")
    assert "but the suffix is longer" in refused.value.message
    assert counting.encoded == [HEAD_CHARS_PER_TOKEN * 1000]
    both = request("x" * 5_000_000, suffix="y" * 4000)  # each alone fits no more than the two together
    with pytest.raises(APIError) as refused:
        infill_prompt(counting, both, 1000, find_layout(fim_tokenizer))
    assert refused.value.param == "prompt"


# ---- a tiny model with FIM tokens behind the server -------------------------------------------------


@pytest.fixture(scope="module")
def fim_loaded(fim_dirs):
    with on_thread(str(fim_dirs["target"]), [str(fim_dirs["drafter"]), NGRAM, NONE]) as held:
        yield held


@pytest.fixture(scope="module")
def fim_client(fim_loaded):
    from openai import OpenAI

    background, _ = start(fim_loaded)
    with background as url, OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60) as client:
        yield client


def engine_answer(fim_loaded, drafter: str, prompt: list[int]) -> tuple[list[int], str]:
    """What the engine alone answers to `prompt`, greedy, with the layout's stop tokens."""
    mlx, target, drafters = fim_loaded
    layout = find_layout(target.tokenizer)

    def run():
        engine = Engine(target.model, drafters[drafter].fresh(), target.tokenizer)
        generation = engine.generate(prompt, GenerationConfig(max_tokens=TOKENS, stop_tokens=layout.stops))
        return [e.token for e in generation.token_events()], generation.stats.finish_reason

    return mlx.call(run)


@pytest.mark.parametrize("drafter", ["drafter", "ngram", "none"])
def test_greedy_fim_equals_the_engine_and_stops_at_the_fim_end_token(fim_client, fim_loaded, fim_dirs, drafter):
    reply = fim_client.completions.create(model=MODEL, prompt=PREFIX, suffix=SUFFIX, max_tokens=TOKENS,
                                          temperature=0, extra_body={"speculative": {"drafter": drafter,
                                                                                     "sources": True}})
    prompt = find_layout(fim_loaded[1].tokenizer).prompt(PREFIX, SUFFIX)
    tokens, finish = engine_answer(fim_loaded, drafter, prompt)
    assert reply.speculative["tokens"] == tokens and finish == "eos"
    assert len(tokens) == fim_dirs["cut"] < TOKENS  # <|fim_pad|> ended it, and is not in the answer
    # The text is what the prompt's and answer's tokens decode to after the prompt's, its leading space kept.
    tokenizer = fim_loaded[1].tokenizer
    assert reply.choices[0].text == tokenizer.decode(prompt + tokens)[len(tokenizer.decode(prompt)):]
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage.prompt_tokens == len(prompt) and reply.usage.completion_tokens == len(tokens)
    assert reply.speculative["drafter"] == drafter


def test_a_fim_answer_streams_the_same_text_and_its_end(fim_client, fim_loaded):
    whole = fim_client.completions.create(model=MODEL, prompt=PREFIX, suffix=SUFFIX, max_tokens=TOKENS,
                                          temperature=0, extra_body={"speculative": {"sources": True}})
    chunks = list(fim_client.completions.create(model=MODEL, prompt=PREFIX, suffix=SUFFIX, max_tokens=TOKENS,
                                                temperature=0, stream=True))
    tokenizer = fim_loaded[1].tokenizer
    prompt = find_layout(tokenizer).prompt(PREFIX, SUFFIX)
    expected = tokenizer.decode(prompt + whole.speculative["tokens"])[len(tokenizer.decode(prompt)):]
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text == expected
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]


def test_the_fim_end_tokens_are_a_fim_requests_alone(fim_client, fim_loaded, fim_dirs):
    """The same prompt as token ids, without a suffix: a plain completion, which goes past <|fim_pad|>."""
    tokenizer = fim_loaded[1].tokenizer
    prompt = find_layout(tokenizer).prompt(PREFIX, SUFFIX)
    plain = fim_client.completions.create(model=MODEL, prompt=prompt, max_tokens=TOKENS, temperature=0,
                                          extra_body={"speculative": {"sources": True}})
    assert plain.choices[0].finish_reason == "length"
    assert plain.speculative["tokens"][fim_dirs["cut"]] == tokenizer.convert_tokens_to_ids("<|fim_pad|>")


def test_an_empty_suffix_is_a_fim_request(fim_client, fim_loaded):
    reply = fim_client.completions.create(model=MODEL, prompt=PREFIX, suffix="", max_tokens=4, temperature=0,
                                          extra_body={"speculative": {"drafter": "none", "sources": True}})
    prompt = find_layout(fim_loaded[1].tokenizer).prompt(PREFIX, "")
    assert reply.usage.prompt_tokens == len(prompt)
    assert reply.speculative["tokens"] == engine_answer(fim_loaded, "none", prompt)[0][:4]


def test_what_a_fim_request_cannot_have_is_refused_in_openais_shape(fim_client):
    import openai

    for fields, param in (({"prompt": PREFIX, "echo": True}, "echo"), ({"prompt": [5, 6, 7]}, "prompt")):
        with pytest.raises(openai.BadRequestError) as refused:
            fim_client.completions.create(model=MODEL, suffix=SUFFIX, max_tokens=4, **fields)
        assert refused.value.body["param"] == param
    with pytest.raises(openai.BadRequestError) as refused:
        fim_client.completions.create(model=MODEL, prompt="word " * 20_000, suffix=SUFFIX, max_tokens=4)
    assert refused.value.body["code"] == "context_length_exceeded"  # a max_tokens past the room is cut to it


def test_a_model_without_fim_tokens_refuses_a_suffix_and_serves_on(server):
    import httpx

    url, _ = server
    body = {"model": MODEL, "prompt": "def f(", "suffix": "\n", "max_tokens": 4}
    refused = httpx.post(f"{url}/v1/completions", json=body, timeout=30)
    assert refused.status_code == 400
    assert refused.json() == {"error": {
        "message": "this model has no fill-in-the-middle tokens, so it cannot complete between a prompt and a "
                   "suffix", "type": "invalid_request_error", "param": "suffix", "code": "unsupported_parameter"}}
    assert httpx.get(f"{url}/health", timeout=30).json()["status"] == "ok"
    plain = httpx.post(f"{url}/v1/completions", json={k: v for k, v in body.items() if k != "suffix"}, timeout=30)
    assert plain.status_code == 200 and plain.json()["usage"]["completion_tokens"] == 4


def test_autocomplete_keeps_on_disk_only_the_blocks_its_next_keystroke_shares(fim_loaded, fim_dirs, tmp_path):
    """Sixteen requests as an editor sends them while one types: a file's text before the cursor that
    grows a few characters a request, and the 4,000 characters after it. Each keystroke changes every
    block after the cursor, so only the whole blocks before it are kept: those the prefixes share, and
    never one past the cursor (15 a request here before, 246 for the sixteen; 21 MB each for the real pair)."""
    from openai import OpenAI

    from specmlx.diskcache.blocks import BLOCK
    from specmlx.diskcache.fingerprint import fingerprint
    from specmlx.diskcache.keeper import Keeper
    from specmlx.diskcache.store import DiskCache

    layout = find_layout(fim_loaded[1].tokenizer)
    head = "".join(f"def f{i}(x):\n    return x * {i}\n\n" for i in range(60))
    tail = "".join(f"\nprint(f{i % 60}(2))" for i in range(300))[:4000]
    kept = Keeper(DiskCache(tmp_path / "kept", 1 << 30), fingerprint(fim_dirs["target"]))
    background, _ = start(fim_loaded, disk=kept)
    prefixes = [head + "result = f1(" + "x" * (3 * i) for i in range(16)]
    with background as url, OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60) as client:
        for prefix in prefixes:
            client.completions.create(model=MODEL, prompt=prefix, suffix=tail, max_tokens=4, temperature=0,
                                      extra_body={"speculative": {"drafter": "ngram"}})
    kept.close()
    shared = {layout.shareable(layout.prompt(prefix, tail)) // BLOCK for prefix in prefixes}
    assert min(shared) >= 2  # the test means something: whole blocks before every cursor
    rows = DiskCache(tmp_path / "kept", 1 << 30).index.oldest()
    assert sorted(entry.end // BLOCK for entry in rows) == list(range(1, max(shared) + 1))
