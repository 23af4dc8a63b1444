"""A real server on 127.0.0.1 with tiny models: a target, a noisy copy as drafter,
an MTP head, prompt lookup and none. Loaded once per session on its own MLX thread."""

from __future__ import annotations

from pathlib import Path

import pytest

from specmlx.drafters import NGRAM, NONE
from specmlx.loading import load_models
from specmlx.mlx_thread import MLXThread
from specmlx.models.mtp import save_mtp
from specmlx.serve.limits import Access
from specmlx.serve.mirror import NO_MIRROR, Mirror
from specmlx.serve.run import Background
from specmlx.serve.serving import build

from .. import tiny

MODEL = "target"  # the served id: the target directory's name
KEY = "sk-test-key"


@pytest.fixture(scope="session")
def served_dirs(model_dirs, target_args, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("served")
    save_mtp(tiny.mtp(target_args, seed=2), root / "mtp")
    return {**model_dirs, "mtp": root / "mtp"}


@pytest.fixture(scope="session")
def loaded(served_dirs):
    """The target and every drafter, loaded on one MLX thread that the servers below share."""
    mlx = MLXThread()
    specs = [str(served_dirs["drafter"]), str(served_dirs["mtp"]), NGRAM, NONE]
    loaded = mlx.call(load_models, str(served_dirs["target"]), specs)
    yield mlx, loaded.target, {d.name: d for d in loaded.drafters}
    mlx.close()


def start(loaded, *, slots: int = 2, max_queue: int = 32, api_key: str | tuple[str, ...] = (),
          max_body_bytes: int = 1 << 20, max_tokens: int = 64, cache_bytes: int = 1 << 30,
          cors_origins: tuple[str, ...] = (), mirror: Mirror = NO_MIRROR, max_batch: int = 8):
    """A Background server over the loaded models, as `specmlx serve` builds it (its own slots and
    worker, the shared MLX thread)."""
    mlx, target, drafters = loaded
    keys = (api_key,) if isinstance(api_key, str) else api_key
    built = build(mlx, target, list(drafters.values()), max_tokens=max_tokens, slots=slots, cache_bytes=cache_bytes,
                  max_queue=max_queue, access=Access(keys, max_body_bytes, cors_origins=cors_origins), mirror=mirror,
                  max_batch=max_batch)
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
