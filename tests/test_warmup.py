"""The warm-up at load: every width of the set run once, and nothing of the engine it warms changed."""

from __future__ import annotations

import mlx.core as mx
import pytest

from specmlx.drafters import ModelDrafter, NoDrafter
from specmlx.drafters.gemma4_assistant import Gemma4AssistantDrafter
from specmlx.drafters.mtp import MTPDrafter
from specmlx.engine import Engine
from specmlx.policy import DraftPolicy
from specmlx.sampling import SamplingParams
from specmlx.schedule.widths import COPIED, WIDTHS, within
from specmlx import warmup
from specmlx.warmup import WARM_UP, wanted, warm_up, warm_up_at_load

from . import tiny
from .test_engine import PROMPTS, run


def drafters(name: str, noisy_drafter, target_args, g4_args, vocab):
    if name == "gemma4":  # reads the target's own cache
        return Gemma4AssistantDrafter(tiny.gemma4_assistant(g4_args, seed=1, ordered=True), vocab)
    if name == "model":
        return ModelDrafter(noisy_drafter, vocab, name="noisy")
    if name == "mtp":
        return MTPDrafter(tiny.mtp(target_args, seed=3, draft_vocab=vocab // 2), vocab)
    return NoDrafter()


@pytest.mark.parametrize("name", ["model", "mtp", "gemma4", "none"])
def test_every_width_runs_with_and_without_a_look_ahead(target, g4_target, noisy_drafter, target_args, g4_args,
                                                        vocab, name):
    drafter = drafters(name, noisy_drafter, target_args, g4_args, vocab)
    ran = warm_up(g4_target if name == "gemma4" else target, drafter, DraftPolicy(max_draft=8))
    # Each draft length twice: k + 1 rows scored alone, then k after a look-ahead row (none for k = 0),
    # each of the k drawn by the drafter where it drafts (greedy, then sampled after catching up); past
    # the longest draft, the lengths a prediction's copy may have (up to `prediction_draft`).
    drawn = (lambda k: 0) if name == "none" else (lambda k: k)
    assert ran == tuple(row for k in COPIED for row in ((k, drawn(k), k + 1), (k, drawn(k), k)))
    shorter = warm_up(target, NoDrafter(), DraftPolicy(max_draft=8, prediction_draft=8))
    assert tuple(k for k, _, _ in shorter[::2]) == WIDTHS


def test_the_longest_width_is_the_policys():
    assert within(DraftPolicy(max_draft=3).max_draft) == (0, 1, 2, 3)


@pytest.mark.parametrize("temp", [0.0, 0.8])
def test_the_warmed_engine_generates_as_a_fresh_one(tokenizer, vocab, target, noisy_drafter, temp):
    prompt = tokenizer.encode(PROMPTS[0])
    settings = dict(max_tokens=24, num_draft=4, seed=3, sampling=SamplingParams(temp=temp))
    fresh = Engine(target, ModelDrafter(noisy_drafter, vocab, name="noisy"), eos_token_ids=[])
    expected, _ = run(fresh, prompt, **settings)

    engine = Engine(target, ModelDrafter(noisy_drafter, vocab, name="noisy"), eos_token_ids=[])
    run(engine, prompt, **settings)  # caches and context held from an answer, then warmed
    held, context = engine.cache.length, list(engine.context)
    drafter_held = engine.drafter.cache.length
    warm_up(target, engine.drafter, DraftPolicy(max_draft=4))
    assert (engine.cache.length, engine.context, engine.drafter.cache.length) == (
        held, context, drafter_held)
    engine.forget(0)
    got, _ = run(engine, prompt, **settings)
    assert [e.token for e in got] == [e.token for e in expected]


@pytest.mark.parametrize("setting, on_gpu, expected", [
    ("1", False, True), ("0", True, False), ("", True, True), ("", False, False)])
def test_runs_by_default_on_a_gpu_only(monkeypatch, setting, on_gpu, expected):
    monkeypatch.setenv(WARM_UP, setting)
    monkeypatch.setattr(mx, "default_device", lambda: mx.gpu if on_gpu else mx.cpu)
    assert wanted() is expected


def test_at_load_warms_each_drafting_drafter_once_on_one_process(monkeypatch, target, noisy_drafter, vocab):
    monkeypatch.setenv(WARM_UP, "1")
    monkeypatch.setattr(warmup, "WARMED", set())
    said: list[str] = []
    policy = DraftPolicy(num_draft=1, max_draft=1, prediction_draft=1)
    drafters = [ModelDrafter(noisy_drafter, vocab, name="noisy"), NoDrafter()]
    warm_up_at_load(target, drafters, policy, one_process=False, progress=said.append)
    assert said == []
    for _ in range(2):
        warm_up_at_load(target, drafters, policy, progress=said.append)
    warm_up_at_load(target, [NoDrafter()], policy, progress=said.append)  # none drafts: the first still runs
    assert said == ["warming up draft lengths 0, 1 with noisy", "warming up draft lengths 0, 1 with none"]


def test_the_warm_up_runs_the_cache_the_answers_will_keep(monkeypatch):
    """With --kv-bits its throwaway engine keeps quantized keys too: the attention kernels it compiles are
    the ones the answers run."""
    from specmlx.caches.kinds import KVBits, kind_of

    made = []

    class Seen(Engine):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append({kind_of(layer).label for layer in self.cache})

    monkeypatch.setattr(warmup, "Engine", Seen)
    wide = tiny.tiny_qwen(64, seed=1, hidden=128)
    warm_up(wide, NoDrafter(), DraftPolicy(max_draft=2), kv=KVBits(8, 32))
    assert made == [{"kv8g32"}]
