"""The fingerprint: which model, and which version of its weights, from cheap facts alone."""

from __future__ import annotations

import json
import os

import pytest

from specmlx.diskcache import fingerprint as module
from specmlx.diskcache.fingerprint import fingerprint


@pytest.fixture
def model_dir(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 64}))
    (folder / "model.safetensors").write_bytes(b"\0" * 1000)
    (folder / "tokenizer.json").write_text("{}")
    return folder


def test_the_same_folder_gives_the_same_fingerprint(model_dir):
    assert fingerprint(model_dir) == fingerprint(model_dir)
    assert fingerprint(model_dir).model == str(model_dir.resolve())


@pytest.mark.parametrize("change", ["weights rewritten", "weights touched", "config", "tokenizer", "shard added"])
def test_another_version_of_the_weights_changes_the_digest_not_the_model(model_dir, change):
    before = fingerprint(model_dir)
    weights = model_dir / "model.safetensors"
    if change == "weights rewritten":
        weights.write_bytes(b"\1" * 1001)
    elif change == "weights touched":
        os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 1))
    elif change == "config":
        (model_dir / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 128}))
    elif change == "tokenizer":
        (model_dir / "tokenizer.json").write_text('{"added": 1}')
    else:
        (model_dir / "model-00002.safetensors").write_bytes(b"")
    after = fingerprint(model_dir)
    assert after.model == before.model and after.digest != before.digest


def test_another_specmlx_or_another_drafter_changes_the_digest(model_dir, tmp_path, monkeypatch):
    drafter = tmp_path / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text("{}")
    alone = fingerprint(model_dir)
    assert fingerprint(model_dir, drafter).digest != alone.digest
    monkeypatch.setattr(module, "__version__", "9.9.9")
    assert fingerprint(model_dir).digest != alone.digest


def test_the_weights_are_never_read(model_dir, monkeypatch):
    """Cheap: names, sizes and times; a checkpoint of tens of gigabytes costs a few stat calls."""
    read = []
    real = module.Path.read_bytes
    monkeypatch.setattr(module.Path, "read_bytes", lambda self: read.append(self.name) or real(self))
    fingerprint(model_dir)
    assert read == ["config.json"]
