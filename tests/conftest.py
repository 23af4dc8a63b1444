"""Shared fixtures: a real byte-level tokenizer and tiny random models built here."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from . import tiny

SLOW = "slow"  # the xdist group of every real-model test


def pytest_configure(config):
    # A server a test starts keeps its prompt cache on disk: in a folder of the run's own, never the user's.
    os.environ["SPECMLX_CACHE_DIR"] = tempfile.mkdtemp(prefix="specmlx-test-cache-")
    # xdist hands out the groups with the most tests first unless told otherwise: the slow group must lead.
    if getattr(config.option, "dist", None) == "loadgroup":
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """For README's test command (`-n 2 --dist loadgroup`): every slow test in one group, so one process loads
    the real models (and holds the memory peak), scheduled first, as the longest; each other module a group
    of its own, since module fixtures assume one worker (as under `--dist loadfile`)."""
    for item in items:
        slow = item.get_closest_marker("slow") is not None
        group = SLOW if slow else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))  # pytest 9.2 loses it (pyproject's pin says why)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: slow first, else as collected


@pytest.fixture(scope="session")
def tokenizer():
    return tiny.train_tokenizer()


@pytest.fixture(scope="session")
def vocab(tokenizer) -> int:
    return len(tokenizer)


@pytest.fixture(scope="session")
def target_args(vocab):
    return tiny.qwen2_args(vocab)


@pytest.fixture(scope="session")
def target(target_args):
    return tiny.build(target_args, seed=0)


@pytest.fixture(scope="session")
def noisy_drafter(target, target_args):
    """Agrees with the target about half the time."""
    return tiny.perturbed(target, target_args, noise=0.3, seed=5)


@pytest.fixture(scope="session")
def random_drafter(vocab):
    """Unrelated random weights: nearly every draft is rejected."""
    return tiny.build(tiny.qwen2_args(vocab, hidden=32), seed=1)


@pytest.fixture(scope="session")
def g4_args(vocab):
    """A tiny Gemma 4 text target's config: the target Gemma 4 assistants read."""
    return tiny.gemma4_args(vocab)


@pytest.fixture(scope="session")
def g4_target(g4_args):
    return tiny.gemma4_target(g4_args, seed=0)


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory, tokenizer, target, target_args, noisy_drafter) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "target": tiny.save_model(target, target_args, tokenizer, root / "target"),
        "drafter": tiny.save_model(noisy_drafter, target_args, tokenizer, root / "drafter"),
    }

