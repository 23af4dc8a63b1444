"""A block drafter (DFlash) served over real HTTP on 127.0.0.1, beside a tiny Qwen3.5 target: loaded as
`specmlx serve --target DIR --drafter DFLASH_DIR --drafter ngram` loads it, offered in /v1/models and
per request, answering the target's own greedy tokens; a restarted server restores its context rows
from the prompt cache on disk, and answers the same."""

from __future__ import annotations

import httpx
import mlx.core as mx
import pytest

from specmlx.diskcache.blocks import BLOCK
from specmlx.diskcache.fingerprint import fingerprint
from specmlx.diskcache.keeper import Keeper
from specmlx.diskcache.store import DiskCache
from specmlx.drafters import NGRAM

from .. import tiny_block, tiny_hybrid
from .conftest import MODEL, on_thread, start
from .test_hybrid import alone  # the target's own greedy answer, for any loaded (mlx, target, drafters)
from .test_worker import CHAT

DFLASH = "dflash"  # the drafter directory's name: what a request names


@pytest.fixture(scope="module")
def served(tokenizer, vocab, tmp_path_factory):
    folder = tmp_path_factory.mktemp("block")
    target = tiny_hybrid.tiny_qwen3_5(vocab, seed=1, layers=tiny_block.LAYERS)
    path = tiny_hybrid.save_qwen3_5(target, vocab, tokenizer, folder / MODEL)
    model, raw = tiny_block.tiny_dflash(vocab, seed=2)
    drafter = tiny_block.save_dflash(model, raw, folder / DFLASH)
    with on_thread(str(path), [str(drafter), NGRAM]) as held:
        yield held


SYSTEM = "You are a careful coding agent; read before you edit and test after. " * 12
ASK = {"model": MODEL, "max_tokens": 10, "temperature": 0, "speculative": {"drafter": DFLASH, "num_draft": 4},
       "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is add?"}]}


def test_it_is_offered_and_answers_as_the_target_alone(served):
    background, worker = start(served, slots=2, max_batch=2)
    with background as url:
        card = httpx.get(url + "/v1/models", timeout=30).json()["data"][0]
        reply = httpx.post(url + CHAT, json=ASK, timeout=120)
    assert DFLASH in card["drafters"]
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == alone(served, ASK)


def test_a_restarted_server_restores_its_context_rows_from_disk(served, tmp_path):
    """The next turn after a restart: the target's cache and the drafter's rows come from disk, and
    the answer, drafted by the block drafter, is the target's own."""
    _, target, _ = served

    def kept() -> Keeper:
        return Keeper(DiskCache(tmp_path / "kept", 1 << 30), fingerprint(target.path))

    first = kept()
    background, _ = start(served, slots=2, max_batch=2, disk=first)
    with background as url:
        answer = httpx.post(url + CHAT, json=ASK, timeout=120).json()["choices"][0]["message"]["content"]
    first.close()
    turn = ASK | {"messages": ASK["messages"] + [{"role": "assistant", "content": answer},
                                                 {"role": "user", "content": "and then"}]}
    again = kept()
    background, _ = start(served, slots=2, max_batch=2, disk=again)
    with background as url:
        reply = httpx.post(url + CHAT, json=turn, timeout=120).json()
    again.close()
    details = reply["usage"]["prompt_tokens_details"]
    assert details["cached_tokens"] == details["disk_tokens"] >= BLOCK
    assert reply["choices"][0]["message"]["content"] == alone(served, turn)
    kept_names = [name for f in (tmp_path / "kept").glob("*.safetensors") for name in mx.load(str(f))]
    assert any(name.startswith(f"drafter.{DFLASH}") for name in kept_names)
