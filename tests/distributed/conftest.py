"""Tiny saved models for sharded runs: a target with the weights' index that
pipeline loading reads, its noisy drafter and an MTP head, and generating
through the command line in this process (the single-process reference)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specmlx.distributed.memory import tensor_bytes
from specmlx.generate import main as generate_main
from specmlx.models.mtp import save_mtp

from .. import tiny


@pytest.fixture(scope="session")
def dirs(tmp_path_factory, model_dirs, target_args) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sharded")
    target = shutil.copytree(model_dirs["target"], root / "target")
    index = {"metadata": {}, "weight_map": {name: "model.safetensors" for name in tensor_bytes(target)}}
    (target / "model.safetensors.index.json").write_text(json.dumps(index))
    mtp = root / "mtp"
    save_mtp(tiny.mtp(target_args, seed=3), mtp)
    return {"target": target, "drafter": model_dirs["drafter"], "mtp": mtp, "ngram": "ngram", "none": "none"}


def single(capsys, *argv) -> dict:
    """`specmlx generate ... --json` in this process: what one machine gives."""
    assert generate_main([*map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)
