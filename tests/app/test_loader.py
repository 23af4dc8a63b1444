"""From command-line choices to models, and to clear instructions when a model is missing."""

import pytest

from app.loader import ModelChoice, failure, load_session, plan
from specmlx.errors import SpecmlxError


def test_a_target_without_drafter_uses_prompt_lookup(tmp_path):
    steps = plan(ModelChoice(target=str(tmp_path)))
    assert (steps.target, steps.drafter, steps.target_name) == (str(tmp_path), "ngram", tmp_path.name)


def test_loading_real_directories_gives_a_session(model_dirs):
    steps = []
    session = load_session(ModelChoice(str(model_dirs["target"]), str(model_dirs["drafter"])), steps.append)
    assert session.drafter_name == "drafter" and session.default_drafter == "model"
    assert steps[-1] == "ready" and any("drafter" in s for s in steps)


def test_a_missing_directory_says_how_to_get_a_model(tmp_path):
    choice = ModelChoice(target=str(tmp_path / "nope"))
    with pytest.raises(SpecmlxError) as err:
        load_session(choice)
    problem = failure(err.value, choice)
    assert "no such model directory" in problem.message
    assert any(c.startswith("python -m specmlx.convert") for c in problem.commands)
    assert any("--target DIR" in c for c in problem.commands)


def test_an_unfetched_preset_names_the_fetch_command(tmp_path, monkeypatch):
    presets = pytest.importorskip("specmlx.presets")
    monkeypatch.setenv("SPECMLX_MODELS", str(tmp_path))
    name = presets.default_preset_name()
    choice = ModelChoice()
    with pytest.raises(SpecmlxError) as err:
        plan(choice)
    problem = failure(err.value, choice)
    assert f"python -m specmlx.models fetch {name}" in problem.message + "\n".join(problem.commands)
    assert problem.commands[0] == f"python -m specmlx.models fetch {name}"


def test_unexpected_errors_are_shown_as_one_line():
    problem = failure(RuntimeError("boom"), ModelChoice(target="x"))
    assert problem.message == "RuntimeError: boom"
