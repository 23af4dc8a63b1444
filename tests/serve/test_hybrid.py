"""A hybrid target served (a tiny Qwen3.5: Gated DeltaNet and attention layers, with its own MTP
layers), over real HTTP on 127.0.0.1: requests at once share the batch's rounds and each answer
is the target's own greedy one; a chat's next turn starts from what its slot kept."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from specmlx.diskcache.blocks import BLOCK
from specmlx.diskcache.fingerprint import fingerprint
from specmlx.diskcache.keeper import Keeper
from specmlx.diskcache.store import DiskCache
from specmlx.drafters import NGRAM, NONE
from specmlx.prompting import encode_chat
from specmlx.caches.recurrent import RENDERED_AGAIN

from .. import tiny_hybrid
from ..damage import damage_in_place
from .conftest import MODEL, greedy, on_thread, start
from .test_worker import CHAT, body

DRAFTERS = ["mtp", "ngram", "none"]


@pytest.fixture(scope="module")
def hybrid(tokenizer, vocab, tmp_path_factory):
    """The tiny Qwen3.5 with MTP layers, loaded as `specmlx serve --target DIR --drafter mtp,ngram,none` does."""
    target = tiny_hybrid.tiny_qwen3_5(vocab, seed=1)
    mtp = tiny_hybrid.tiny_native_mtp(target, seed=2, guesses=True)
    path = tiny_hybrid.save_qwen3_5(target, vocab, tokenizer, tmp_path_factory.mktemp("hybrid") / MODEL, mtp=mtp)
    with on_thread(str(path), ["mtp", NGRAM, NONE]) as held:
        yield held


def alone(hybrid, payload: dict) -> str:
    """The target's own greedy answer to a chat request, as text."""
    mlx, target, _ = hybrid
    prompt = encode_chat(target.tokenizer, payload["messages"])
    return target.tokenizer.decode(mlx.call(greedy, target.model, prompt, payload["max_tokens"]))


def request(i: int) -> dict:
    return body(i, max_tokens=10 + i % 5, speculative={"drafter": DRAFTERS[i % 3], "num_draft": 1 + i % 4})


def test_requests_at_once_share_rounds_and_each_answer_is_the_targets_own(hybrid):
    background, worker = start(hybrid, slots=6, max_batch=6)
    start_line = threading.Barrier(6, timeout=30)

    def together(i: int) -> str:
        start_line.wait()
        reply = httpx.post(url + CHAT, json=request(i), timeout=120)
        assert reply.status_code == 200, reply.text
        return reply.json()["choices"][0]["message"]["content"]

    with background as url, ThreadPoolExecutor(6) as pool:
        batched = list(pool.map(together, range(6)))
    assert batched == [alone(hybrid, request(i)) for i in range(6)]
    assert worker.runner.batch.widest > 1  # they did share rounds


def test_a_chats_next_turn_starts_from_its_slots_checkpoint(hybrid):
    background, _ = start(hybrid, slots=2, max_batch=2)
    first = body(3, max_tokens=12, speculative={"drafter": "mtp", "num_draft": 3})
    with background as url:
        reply = httpx.post(url + CHAT, json=first, timeout=120).json()
        answer = reply["choices"][0]["message"]["content"]
        turn = first | {"messages": first["messages"] + [{"role": "assistant", "content": answer},
                                                         {"role": "user", "content": "and then"}]}
        again = httpx.post(url + CHAT, json=turn, timeout=120).json()
    assert answer == alone(hybrid, first)
    assert again["choices"][0]["message"]["content"] == alone(hybrid, turn)
    asked = reply["usage"]["prompt_tokens"]
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= asked - RENDERED_AGAIN


def test_a_prompt_whose_end_differs_starts_from_the_checkpoint_its_slot_kept_through_the_batch(hybrid):
    """The slot's rows went into the batch and back: the checkpoint kept at its prefill, before the
    prompt's last `RENDERED_AGAIN` tokens, is what a prompt differing in its last tokens reuses."""
    background, _ = start(hybrid, slots=2, max_batch=2)
    words = "def for import The print return class " * 4
    first = {"model": MODEL, "prompt": words + "while", "max_tokens": 8, "temperature": 0,
             "speculative": {"drafter": "mtp", "num_draft": 2}}
    with background as url:
        one = httpx.post(url + "/v1/completions", json=first, timeout=120).json()
        two = httpx.post(url + "/v1/completions", json=first | {"prompt": words + "yield"}, timeout=120).json()
    asked = one["usage"]["prompt_tokens"]
    assert two["usage"]["prompt_tokens"] == asked
    assert two["usage"]["prompt_tokens_details"]["cached_tokens"] == asked - RENDERED_AGAIN


def test_a_restarted_server_and_a_subagent_restore_a_hybrids_state_from_disk(hybrid, fingerprinted):
    """The prompt cache on disk with a hybrid target: after a restart, a next turn restores the
    recurrent state its turn kept, and a subagent (the same long system prompt, its own question)
    the state its prefill kept at the last whole block they share; both answer as the target alone,
    drafting with its MTP layers."""
    system = "You are a careful coding agent; read before you edit and test after. " * 12
    first = {"model": MODEL, "max_tokens": 8, "temperature": 0, "speculative": {"drafter": "mtp", "num_draft": 2},
             "messages": [{"role": "system", "content": system}, {"role": "user", "content": "What is add?"}]}
    kept = fingerprinted()
    background, _ = start(hybrid, slots=2, max_batch=2, disk=kept)
    with background as url:
        answer = httpx.post(url + CHAT, json=first, timeout=120).json()["choices"][0]["message"]["content"]
    kept.close()
    turn = first | {"messages": first["messages"] + [{"role": "assistant", "content": answer},
                                                     {"role": "user", "content": "and then"}]}
    subagent = first | {"messages": [first["messages"][0], {"role": "user", "content": "Find the tests."}]}
    for payload in (turn, subagent):
        again = fingerprinted()
        background, _ = start(hybrid, slots=2, max_batch=2, disk=again)  # restarted: empty slots
        with background as url:
            reply = httpx.post(url + CHAT, json=payload, timeout=120).json()
        again.close()
        details = reply["usage"]["prompt_tokens_details"]
        assert details["cached_tokens"] == details["disk_tokens"] >= BLOCK
        assert reply["choices"][0]["message"]["content"] == alone(hybrid, payload)


def test_a_hybrids_recurrent_state_damaged_in_place_is_never_restored(hybrid, fingerprinted):
    """The recurrent layers' states kept on disk, damaged in place at their size: a restarted server
    prefills, and answers, through the official client, as the target alone."""
    system = "You are a careful coding agent; read before you edit and test after. " * 12
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "What is add?"}]
    first = {"model": MODEL, "max_tokens": 8, "temperature": 0, "messages": messages}
    kept = fingerprinted()
    background, _ = start(hybrid, disk=kept)
    with background as url:
        answer = httpx.post(url + CHAT, json=first, timeout=120).json()["choices"][0]["message"]["content"]
    kept.close()
    files = sorted(kept.store.root.glob("*.safetensors"))
    assert files and all(damage_in_place(f, lambda name: ".state." in name) for f in files)
    turn = first | {"messages": messages + [{"role": "assistant", "content": answer}, {"role": "user", "content": "and then"}]}
    again = fingerprinted()
    background, _ = start(hybrid, disk=again)
    with background as url:
        reply = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0).chat.completions.create(
            model=MODEL, messages=turn["messages"], max_tokens=8, temperature=0)
    again.close()
    assert reply.usage.prompt_tokens_details.cached_tokens == 0
    assert reply.choices[0].message.content == alone(hybrid, turn)


@pytest.fixture
def fingerprinted(hybrid, tmp_path):
    """A new Keeper over one folder, for the hybrid's weights, each time it is called (a restart)."""
    _, target, _ = hybrid
    return lambda: Keeper(DiskCache(tmp_path / "kept", 1 << 30), fingerprint(target.path))
