"""The real default pair on two local ranks: the 1.5B target sharded (tensor parallel,
vocabulary split), the 0.5B drafting on rank 0, greedy, equal to one process.

Slow. This process loads no model: one process's answers come from `specmlx
generate` run first, then the two ranks run, so at most one copy of the pair
is in memory at a time."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specmlx import presets
from specmlx.presets.fetch import fetch_preset
from specmlx.prompting import packaged_prompts_path, read_prompts

from . import ranks

pytestmark = pytest.mark.slow

TOKENS = 32
LOAD_AND_RUN = 900  # seconds for two ranks to load their shards and generate 32 tokens here


def first_prompt() -> str:
    """The first packaged bench prompt: one is enough (a second doubled the test's five minutes and found
    nothing the first does not; the tiny-model tests in `test_lockstep.py` cover more shapes)."""
    return read_prompts(packaged_prompts_path(), limit=1)[0].prompt


@pytest.fixture(scope="module")
def preset() -> str:
    chosen = presets.get_preset(presets.default_preset_name())
    fetch_preset(chosen, progress=False, log=lambda m: None)
    return chosen.name


def test_sharded_speculative_output_equals_one_process(preset, tmp_path):
    prompt = first_prompt()
    # A fixed length: the automatic one follows the clock and may not draft at all on a loaded machine.
    common = ["generate", "--chat", "--prompt", prompt, "--max-tokens", str(TOKENS), "--json", "--num-draft", "4"]
    alone = subprocess.run([sys.executable, "-m", "specmlx", *common, "--drafter", "none"],
                           capture_output=True, text=True, timeout=LOAD_AND_RUN)
    assert alone.returncode == 0, alone.stderr[-2000:]
    lead, other = ranks.run([*common, "--distributed"], tmp_path, timeout=LOAD_AND_RUN)
    assert lead.returncode == 0, lead.stderr[-2000:]
    assert other.returncode == 0, other.stderr[-2000:]
    sharded, single = lead.json(), json.loads(alone.stdout)
    assert sharded["tokens"] == single["tokens"]
    assert sharded["stats"]["drafter"] == "qwen2.5-coder-0.5b" and sharded["stats"]["accepted"] > 0
