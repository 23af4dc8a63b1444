"""`python -m specmlx.bench.agent`: its tools are the bench's tool prompts', and without the default preset's
tokenizer it says in one line what to do."""

from __future__ import annotations

import pytest

from specmlx.bench import agent
from specmlx.errors import SpecmlxError


def test_its_tools_are_the_tool_prompts_each_once():
    names = [t["function"]["name"] for t in agent.tools()]
    assert len(names) == len(set(names)) == 4 and "read_file" in names


def test_without_the_presets_tokenizer_it_says_what_to_fetch(tmp_path, monkeypatch):
    monkeypatch.setattr(agent, "model_path", lambda preset: tmp_path)
    with pytest.raises(SpecmlxError, match="run `specmlx models fetch` first"):
        agent.main([])
