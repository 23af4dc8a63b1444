"""A real server on 127.0.0.1 with tiny models: a target, a noisy copy as drafter,
an MTP head, prompt lookup and none. Loaded once per session on its own MLX thread.
And a tiny target with fill-in-the-middle tokens, for FIM requests and their bench."""

from __future__ import annotations

import contextlib
import json
import threading
from collections import deque
from pathlib import Path
from typing import Iterator

import httpx
import mlx.core as mx
import pytest
from mlx_lm.generate import generate_step

from specmlx.diskcache.keeper import Keeper
from specmlx.drafters import NGRAM, NONE
from specmlx.loading import load_models, load_tokenizer
from specmlx.mlx_thread import MLXThread
from specmlx.models.mtp import save_mtp
from specmlx.serve.limits import Access
from specmlx.serve.mirror import NO_MIRROR, Mirror
from specmlx.serve.run import Background
from specmlx.serve.fim import find_layout
from specmlx.serve.builder import build

from .. import tiny
from ..fetched import fetched

MODEL = "target"  # the served id: the target directory's name
KEY = "sk-test-key"
FIM = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>"]
FIM_PREFIX, FIM_SUFFIX = "def add(a, b):\n    return ", "\n\nfor i in range(10):\n    print(add(i, i))\n"
FIM_TOKENS = 24


@pytest.fixture(scope="session")
def served_dirs(model_dirs, target_args, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("served")
    save_mtp(tiny.mtp(target_args, seed=2), root / "mtp")
    return {**model_dirs, "mtp": root / "mtp"}


@contextlib.contextmanager
def on_thread(target: str, specs: list) -> Iterator[tuple]:
    """A target and its drafters (`load_models`'s specs) loaded on an MLX thread of their own, as `start`
    takes them: (the thread, the target, the drafters by name); the thread is closed after."""
    mlx = MLXThread()
    try:
        loaded = mlx.call(load_models, target, specs)
        yield mlx, loaded.target, {d.name: d for d in loaded.drafters}
    finally:
        mlx.close()


@pytest.fixture(scope="session")
def loaded(served_dirs):
    """The target and every drafter, loaded on one MLX thread that the servers below share."""
    with on_thread(str(served_dirs["target"]), [str(served_dirs["drafter"]), str(served_dirs["mtp"]), NGRAM, NONE]) as held:
        yield held


def start(loaded, *, slots: int = 2, max_queue: int = 32, api_key: str | tuple[str, ...] = (),
          max_body_bytes: int = 1 << 20, max_tokens: int = 64, cache_bytes: int = 1 << 30,
          cors_origins: tuple[str, ...] = (), mirror: Mirror = NO_MIRROR, max_batch: int = 8,
          disk: Keeper | None = None, vision=None, kv=None):
    """A Background server over the loaded models, as `specmlx serve` builds it (its own slots and
    worker, the shared MLX thread)."""
    mlx, target, drafters = loaded
    keys = (api_key,) if isinstance(api_key, str) else api_key
    built = build(mlx, target, list(drafters.values()), max_tokens=max_tokens, slots=slots, cache_bytes=cache_bytes,
                  max_queue=max_queue, access=Access(keys, max_body_bytes, cors_origins=cors_origins), mirror=mirror,
                  max_batch=max_batch, disk=disk, vision=vision, kv=kv)
    return Background(built.app, built.worker), built.worker


@pytest.fixture(scope="module")
def server(loaded):
    """(base url, worker) of a server with default settings."""
    background, worker = start(loaded)
    with background as url:
        yield url, worker


@pytest.fixture()
def client(server):
    from openai import OpenAI

    url, _ = server
    with OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60) as c:
        yield c


@pytest.fixture(scope="session")
def qwen():
    """The default preset's target tokenizer, as the server loads it: fetched at first use (`fetched`),
    so its tests are slow."""
    return load_tokenizer("qwen2.5-coder-1.5b", fetched("qwen2.5-coder-1.5b"))


@pytest.fixture(scope="session")
def fim_tokenizer():
    """The tiny tokenizer with Qwen2.5-Coder's FIM tokens."""
    return tiny.train_tokenizer(specials=tiny.SPECIALS + FIM)


def greedy(model, prompt: list[int], n: int) -> list[int]:
    return [int(t) for t, _ in generate_step(mx.array(prompt), model, max_tokens=n)]


@pytest.fixture(scope="session")
def fim_dirs(fim_tokenizer, tmp_path_factory):
    """A tiny FIM target that writes <|fim_pad|> where it would first write its answer's ninth token
    (that token's head row, scaled up), and a noisy copy of it as drafter; "cut": the answer's length."""
    args, root = tiny.qwen2_args(len(fim_tokenizer)), tmp_path_factory.mktemp("fim")
    target = tiny.build(args, seed=0)
    saved = tiny.save_model(target, args, fim_tokenizer, root / "target")
    served = load_tokenizer("target", saved)  # as the server loads it: its merges can differ from the trained
    prompt = find_layout(served).prompt(FIM_PREFIX, FIM_SUFFIX)
    answer = greedy(target, prompt, FIM_TOKENS)
    pad = served.convert_tokens_to_ids("<|fim_pad|>")
    head = target.lm_head.weight
    target.lm_head.weight = head.at[pad].add(head[answer[8]] * 1.01 - head[pad])
    cut = answer.index(answer[8])
    assert greedy(target, prompt, cut + 1) == answer[:cut] + [pad]
    drafter = tiny.perturbed(target, args, noise=0.3, seed=5)
    return {"target": tiny.save_model(target, args, fim_tokenizer, saved),
            "drafter": tiny.save_model(drafter, args, fim_tokenizer, root / "drafter"), "cut": cut}


@pytest.fixture(scope="session")
def tool_tokenizer():
    """The tiny tokenizer with Qwen2.5's tool-call tokens and a template that renders tools and calls."""
    return tiny.train_tokenizer(specials=tiny.SPECIALS + tiny.TOOL_SPECIALS, chat_template=tiny.TOOL_TEMPLATE)


@pytest.fixture(scope="session")
def tool_dirs(tool_tokenizer, tmp_path_factory) -> dict[str, Path]:
    """A tiny target that calls tools (as far as its tokenizer goes: it is random), and a noisy copy as drafter."""
    args, root = tiny.qwen2_args(len(tool_tokenizer)), tmp_path_factory.mktemp("tools")
    target = tiny.build(args, seed=0)
    drafter = tiny.perturbed(target, args, noise=0.3, seed=5)
    return {"target": tiny.save_model(target, args, tool_tokenizer, root / "target"),
            "drafter": tiny.save_model(drafter, args, tool_tokenizer, root / "drafter")}


def healthy(url: str) -> bool:
    return httpx.get(f"{url}/health", timeout=30).json()["status"] == "ok"


def sse_events(text: str) -> list[dict]:
    """A stream's events' data, each checked to be named by its type (an `event:` line, then its `data:`)."""
    out = []
    for raw in text.strip().split("\n\n"):
        name, data = raw.split("\n")
        out.append(json.loads(data.removeprefix("data: ")))
        assert name == "event: " + out[-1]["type"]
    return out


class Records:
    """A worker's records that say when one is added, so a test waits for the worker, not on the clock.
    Appends go through to the worker's own deque, so none is lost when it is handed back."""

    def __init__(self, records: deque) -> None:
        self.records = records
        self.added = threading.Condition()

    def append(self, record) -> None:  # on the MLX thread
        with self.added:
            self.records.append(record)
            self.added.notify_all()

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self):
        return iter(self.records)

    def __getitem__(self, index):
        return self.records[index]


def watch_records(worker, monkeypatch) -> Records:
    """The worker's records, watched for the rest of the test (`await_records`), then handed back."""
    monkeypatch.setattr(worker.ledger, "records", Records(worker.ledger.records))
    return worker.ledger.records


def await_records(records: Records, count: int, timeout: float = 30) -> bool:
    """Whether `records` holds `count` records, waiting up to `timeout` seconds for the worker to add them."""
    with records.added:
        return records.added.wait_for(lambda: len(records) >= count, timeout)
