"""The tests' preset helper (`fetched.py`): a preset not there yet is fetched, not skipped; a test is
skipped, saying why, only where fetching fails."""

from __future__ import annotations

import pytest

from specmlx.errors import SpecmlxError

from . import fetched as helper


@pytest.fixture
def empty_models(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECMLX_MODELS", str(tmp_path))
    return tmp_path


def test_a_preset_not_there_is_fetched_once(empty_models, monkeypatch):
    tried = []

    def fetch(preset, source, force, progress, log):
        tried.append((preset.name, source.role))
        out = empty_models / preset.name / source.role
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        return out

    monkeypatch.setattr(helper, "fetch_model", fetch)
    try:
        path = helper.fetched("gemma-3-270m")
    except pytest.skip.Exception as skipped:  # a skip would hide that its tests check nothing
        pytest.fail(f"skipped, not fetched: {skipped}")
    assert path == empty_models / "gemma-3-270m" / "target" and tried == [("gemma-3-270m", "target")]
    assert helper.fetched("gemma-3-270m") == path and len(tried) == 1


def test_a_machine_that_cannot_fetch_it_skips_saying_why(empty_models, monkeypatch):
    def fail(*args, **kwargs):
        raise SpecmlxError("cannot fetch gemma-3-270m/target: no offline packages, no hub")

    monkeypatch.setattr(helper, "fetch_model", fail)
    with pytest.raises(pytest.skip.Exception, match="cannot be fetched on this machine .*no offline packages"):
        helper.fetched("gemma-3-270m")
