"""`serve --kv-bits`: a server whose target keeps its keys and values at 8 or 4 bits answers as the target alone
with that quantized cache, with speculation and without, one request at a time or several in its batch; its
conversations are kept on disk as quantized blocks,
which a restarted server restores and answers from as a fresh one does, and which a server at another setting
never reads."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from specmlx.caches.kinds import KVBits
from specmlx.diskcache.fingerprint import fingerprint
from specmlx.diskcache.keeper import Keeper
from specmlx.diskcache.store import DiskCache
from specmlx.drafters import NGRAM, NONE
from specmlx.serve.openai.protocol import ChatRequest
from specmlx.serve.prompts import chat_prompt

from .. import tiny
from ..quantized import alone
from .conftest import MODEL, on_thread, start
from .test_disk import FIRST

TOKENS = 8
DRAFTER = "drafter"


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """A tiny target with heads of 32 (a group of 32 quantizes them), a noisy copy drafting: (loaded, path)."""
    tok = tiny.train_tokenizer()
    args = tiny.qwen2_args(len(tok), hidden=128)
    target = tiny.build(args, seed=0, sharpness=1.0)
    root = tmp_path_factory.mktemp("kv")
    path = tiny.save_model(target, args, tok, root / MODEL)
    tiny.save_model(tiny.perturbed(target, args, 0.5, seed=3), args, tok, root / DRAFTER)
    with on_thread(str(path), [str(root / DRAFTER), NGRAM, NONE]) as held:
        yield held, path


def ask(url: str, drafter: str, messages: list[dict] = FIRST) -> dict:
    body = {"model": MODEL, "messages": messages, "max_tokens": TOKENS, "temperature": 0,
            "speculative": {"drafter": drafter, "num_draft": 3, "sources": True}}
    reply = httpx.post(url + "/v1/chat/completions", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    return reply.json()


def expected(held, kv: KVBits, messages: list[dict] = FIRST) -> list[int]:
    mlx, target, _ = held
    prompt = chat_prompt(target.tokenizer, ChatRequest.model_validate({"model": MODEL, "messages": messages}))
    return mlx.call(alone, target.model, prompt, TOKENS, kv)


@pytest.mark.parametrize("bits", [8, 4])
def test_answers_are_the_target_alone_with_the_same_quantized_cache(wide, bits):
    held, _ = wide
    kv = KVBits(bits, 32)
    background, worker = start(held, kv=kv)
    assert worker.slots.kv == kv
    with background as url:
        for drafter in (NONE, NGRAM, DRAFTER):
            assert ask(url, drafter)["speculative"]["tokens"] == expected(held, kv), drafter


def test_requests_sharing_the_batch_each_answer_as_the_target_alone(wide):
    """Six requests at once, of three drafters and different prompts, in one batch of quantized rows."""
    held, _ = wide
    kv = KVBits(4, 32)
    drafters = [NONE, NGRAM, DRAFTER] * 2
    questions = [[{"role": "user", "content": f"question {i}: " + "how do caches work " * (i + 1)}]
                 for i in range(len(drafters))]
    background, worker = start(held, kv=kv, slots=6, max_batch=6)
    with background as url:
        line = threading.Barrier(len(drafters), timeout=30)

        def together(i: int) -> dict:
            line.wait()
            return ask(url, drafters[i], questions[i])

        with ThreadPoolExecutor(len(drafters)) as pool:
            replies = list(pool.map(together, range(len(drafters))))
    assert worker.runner.batch.widest > 1  # they did share rounds
    for i, reply in enumerate(replies):
        assert reply["speculative"]["tokens"] == expected(held, kv, questions[i]), drafters[i]


def test_a_restarted_server_restores_quantized_blocks_and_another_setting_reads_none(wide, tmp_path):
    held, path = wide
    kv = KVBits(8, 32)
    answer = expected(held, kv)

    def served(at: KVBits) -> dict:
        disk = Keeper(DiskCache(tmp_path / "kept", 1 << 30), fingerprint(path, kv=at))  # as `serve` makes it
        background, _ = start(held, kv=at, disk=disk)
        with background as url:
            reply = ask(url, DRAFTER)
        disk.flush()  # the stopped server kept its slots (a slot is kept once free, which may follow the reply)
        return reply

    first = served(kv)
    assert first["usage"]["prompt_tokens_details"]["disk_tokens"] == 0
    again = served(kv)  # a fresh server on the same folder
    assert again["usage"]["prompt_tokens_details"]["disk_tokens"] >= 256
    assert first["speculative"]["tokens"] == again["speculative"]["tokens"] == answer
    other = served(KVBits(4, 32))
    assert other["usage"]["prompt_tokens_details"]["disk_tokens"] == 0
    assert other["speculative"]["tokens"] == expected(held, KVBits(4, 32))
    # Its blocks are another version of the same prompt's: written in place of the 8-bit ones, and read
    # by the next 4-bit server.
    assert served(KVBits(4, 32))["usage"]["prompt_tokens_details"]["disk_tokens"] >= 256


def test_a_drafter_reading_the_targets_keys_is_refused_at_start(wide):
    """A Gemma 4 assistant reads the target's keys themselves: with --kv-bits every request naming it would
    fail, so the server refuses it once, at start, in one line."""
    from specmlx.drafters import ModelDrafter
    from specmlx.errors import SpecmlxError
    from specmlx.serve.builder import build

    (mlx, target, drafters), _ = wide

    class Reading(ModelDrafter):
        reads_target_cache = True

    reading = Reading(drafters[DRAFTER].model, drafters[DRAFTER].vocab_size, name="reader")
    with pytest.raises(SpecmlxError, match="drafter reader reads the target's keys and values"):
        build(mlx, target, [drafters[NGRAM], reading], kv=KVBits(8, 32))
