"""What an engine's answer kept on disk is restored by another engine (a restarted process): its
owner's alone, past what memory holds, with the drafter's own state, and greedy continuing from it
is the target's alone, for a transformer and a hybrid (Qwen3.5: Gated DeltaNet layers)."""

from __future__ import annotations

import functools
import random
from functools import partial

import pytest

from specmlx.caches.stream import Stream, make_cache
from specmlx import keeping
from specmlx.diskcache.blocks import BLOCK
from specmlx.diskcache.fingerprint import Fingerprint
from specmlx.diskcache.keeper import MIN_GAIN, Keeper
from specmlx.diskcache.store import DiskCache
from specmlx.drafters import ModelDrafter, NoDrafter
from specmlx.drafters.mtp import MTPDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.policy import DraftPolicy
from specmlx.caches.recurrent import RENDERED_AGAIN, is_recurrent

from .. import tiny, tiny_hybrid
from ..test_engine_hybrid import greedy_alone
from .conftest import FP

VOCAB = 64
PROMPT = random.Random(0).choices(range(VOCAB), k=2 * BLOCK + 30)
CONFIG = GenerationConfig(max_tokens=12, policy=DraftPolicy(num_draft=3))
BUILDS = {"qwen2": tiny.tiny_qwen, "qwen3_5": tiny_hybrid.tiny_qwen3_5}


@functools.cache
def built(name: str):
    return BUILDS[name](VOCAB, seed=1)


@pytest.fixture(scope="module", params=sorted(BUILDS))
def target(request):
    return built(request.param)


@pytest.fixture
def keeper(tmp_path):
    kept = Keeper(DiskCache(tmp_path / "kept", cap_bytes=1 << 30), FP)
    yield kept
    kept.close()


def drafters(target):
    """A fresh drafter of each kind a slot holds, by name: its own state, the same weights."""
    model = ModelDrafter(tiny.perturbed(target, target.args, noise=0.5, seed=3), VOCAB)
    found = {"none": NoDrafter, "model": model.fresh}
    if not hybrid(target):  # the tiny MTP head reads a Qwen2's hidden states
        head = tiny.mtp(target.args, seed=2)
        found["mtp"] = lambda: MTPDrafter(head, VOCAB)
    return found


def hybrid(target) -> bool:
    return any(is_recurrent(layer) for layer in make_cache(target))


def answer(engine: Engine, prompt: list[int]) -> list[int]:
    return [e.token for e in engine.generate(prompt, CONFIG).token_events()]


def answered(target, keeper, drafter, owner="alice"):
    """An engine that answered PROMPT, its caches kept on disk; the prompt of the next turn."""
    engine = Engine(target, drafter(), eos_token_ids=[])
    out = answer(engine, PROMPT)
    keeping.keep(keeper, engine, owner, len(PROMPT))
    keeper.flush()
    return engine, PROMPT + out + [3, 1, 4, 1, 5]


@pytest.mark.parametrize("build,kind", [(b, k) for b in sorted(BUILDS) for k in ("none", "model", "mtp")
                                        if (b, k) != ("qwen3_5", "mtp")])  # the tiny MTP head reads a Qwen2
def test_a_restarted_engine_continues_from_what_the_disk_kept(build, keeper, kind):
    target = built(build)
    make = drafters(target)[kind]
    first, turn = answered(target, keeper, make)
    second = Engine(target, make(), eos_token_ids=[])
    gained = keeping.restore(keeper, second, "alice", turn)
    assert gained == first.cache_length() == second.reusable(turn) > 2 * BLOCK
    if kind == "model":  # its own cache came back for the blocks it held in full (it lags the target's);
        # a hybrid drafter held no state at their end, so it prefills itself
        assert second.drafter.cache.length == (0 if hybrid(target) else 2 * BLOCK)
    if kind == "mtp":  # the target's hidden states it drafts from came back
        assert second.drafter.history.length == gained
    assert answer(second, turn) == greedy_alone(target, turn, CONFIG.max_tokens)


def test_another_owner_finds_nothing(target, keeper):
    _, turn = answered(target, keeper, NoDrafter)
    stranger = Engine(target, NoDrafter(), eos_token_ids=[])
    assert keeping.restore(keeper, stranger, "mallory", turn) == 0 == stranger.cache_length()


def test_what_memory_holds_is_not_read_again(target, keeper):
    """A slot holding the prompt but fewer than MIN_GAIN of what the disk has keeps its own caches."""
    first, turn = answered(target, keeper, NoDrafter)
    assert keeping.restore(keeper, first, "alice", turn) == 0  # it holds it all
    short = Engine(target, NoDrafter(), eos_token_ids=[])
    answer(short, turn[: first.cache_length() - MIN_GAIN // 2])
    if not hybrid(target):  # (a hybrid's memory reaches back only to its checkpoint, further)
        assert keeping.restore(keeper, short, "alice", turn) == 0
    assert keeping.restore(keeper, Engine(target, NoDrafter(), eos_token_ids=[]), "alice", turn) == first.cache_length()


def test_a_next_turn_that_renders_the_prompts_end_anew_restores_up_to_it(target, keeper):
    """The prompt's end less `RENDERED_AGAIN` is kept as a block of its own (a hybrid's checkpoint)."""
    _, turn = answered(target, keeper, NoDrafter)
    at = len(PROMPT) - RENDERED_AGAIN
    anew = PROMPT[:at] + [9, 9, 2] + turn[len(PROMPT):]
    engine = Engine(target, NoDrafter(), eos_token_ids=[])
    assert keeping.restore(keeper, engine, "alice", anew) == at
    assert answer(engine, anew) == greedy_alone(target, anew, CONFIG.max_tokens)


def test_a_branch_restores_the_whole_blocks_it_shares_where_every_layer_can(target, keeper):
    """A subagent: the same first block, then its own question. A KV cache restores that block; a
    recurrent layer holds no state at a block's end once past it, so a hybrid prefills it..."""
    answered(target, keeper, NoDrafter)
    branch = PROMPT[:BLOCK] + [7] * 40
    engine = Engine(target, NoDrafter(), eos_token_ids=[])
    assert keeping.restore(keeper, engine, "alice", branch) == (0 if hybrid(target) else BLOCK)
    assert answer(engine, branch) == greedy_alone(target, branch, CONFIG.max_tokens)


def test_a_prefill_keeps_each_block_as_it_passes_so_a_hybrids_branch_restores_it(target, keeper):
    """...unless its prefill kept each block as it completed it (`keeping.watch`), the state then held."""
    engine = Engine(target, NoDrafter(), eos_token_ids=[])
    keeping.watch(keeper, engine, "alice")
    if not hybrid(target):  # a transformer's prefill keeps nothing: its blocks wait for the answer
        assert engine.on_prefilled is None
        engine.on_prefilled, engine.prefill_block = partial(keeper.keep_prefilled, "alice", engine.capture), BLOCK
    answer(engine, PROMPT)
    keeper.flush()
    for branch in (PROMPT[:BLOCK] + [7] * 40, PROMPT[: 2 * BLOCK] + [7] * 40):
        fresh = Engine(target, NoDrafter(), eos_token_ids=[])
        assert keeping.restore(keeper, fresh, "alice", branch) == len(branch) - 40
        assert answer(fresh, branch) == greedy_alone(target, branch, CONFIG.max_tokens)


@pytest.mark.parametrize("other", [Fingerprint(FP.model, "digest-2"), Fingerprint("models/another", FP.digest)],
                         ids=["another version", "another model"])
def test_what_other_weights_kept_is_never_restored(target, keeper, other):
    _, turn = answered(target, keeper, NoDrafter)
    assert keeping.restore(Keeper(keeper.store, other), Engine(target, NoDrafter(), eos_token_ids=[]), "alice", turn) == 0


def test_a_restore_that_fails_is_a_line_in_the_log_and_a_prefill(target, keeper, monkeypatch, log_lines):
    """Nothing of the disk fails a request: a read that raises leaves the caches as they were; a restore
    that raises midway leaves them empty and consistent; either way the prompt is prefilled."""
    _, turn = answered(target, keeper, NoDrafter)
    engine = Engine(target, NoDrafter(), eos_token_ids=[])
    answer(engine, PROMPT[:40])
    held = engine.cache_length()
    with monkeypatch.context() as patched:
        patched.setattr(keeper.store, "load", lambda *args: (_ for _ in ()).throw(OSError("I/O error")))
        assert keeping.restore(keeper, engine, "alice", turn) == 0
    assert engine.cache_length() == held > 0  # nothing read, nothing lost
    assert any("could not be read" in line and "I/O error" in line for line in log_lines)
    with monkeypatch.context() as patched:
        patched.setattr(engine, "restore", lambda *args: (_ for _ in ()).throw(ValueError("torn block")))
        assert keeping.restore(keeper, engine, "alice", turn) == 0
    assert engine.cache_length() == len(engine.context) == 0
    assert any("could not be restored" in line and "torn block" in line for line in log_lines)
    assert answer(engine, turn) == greedy_alone(target, turn, CONFIG.max_tokens)


def test_blocks_of_a_model_of_other_layers_restore_nothing(target, keeper):
    """A drafter of the same name but other layers: its arrays are not taken for this one's."""
    first, turn = answered(target, keeper, drafters(target)["model"])
    blocks = keeper.store.load("alice", FP, keeper.store.longest("alice", FP, turn))
    fewer = ModelDrafter(tiny.perturbed(target, target.args, noise=0.5, seed=3), VOCAB)
    fewer.cache = Stream(fewer.cache[:-1])  # as a drafter of one layer fewer
    assert fewer.restore(blocks, f"drafter.{first.drafter.name}") == 0


def test_keep_marks_blocks_on_disk_used(target, keeper):
    first, _ = answered(target, keeper, NoDrafter)
    before = {e.hash: e.last_used for e in keeper.store.index.oldest()}
    keeping.keep(keeper, first, "alice", len(PROMPT))  # the same turn again: nothing new to write
    keeper.flush()
    after = {e.hash: e.last_used for e in keeper.store.index.oldest()}
    assert after.keys() == before.keys() and all(after[h] > before[h] for h in before)
