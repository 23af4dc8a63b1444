"""Output appears whole or not at all."""

import pytest

from specmlx.convert import convert
from specmlx.convert import gguf_convert
from specmlx.convert.atomic import staged_path
from specmlx.errors import SpecmlxError


def leftovers(parent):
    return [p.name for p in parent.iterdir() if ".partial-" in p.name]


def test_success_moves_into_place(tmp_path):
    out = tmp_path / "model"
    with staged_path(out) as work:
        assert not work.exists() and work.parent.parent == tmp_path
        work.mkdir()
        (work / "f").write_text("x")
        assert not out.exists()
    assert (out / "f").read_text() == "x"
    assert leftovers(tmp_path) == []


def test_failure_leaves_nothing(tmp_path):
    out = tmp_path / "model"
    with pytest.raises(RuntimeError):
        with staged_path(out) as work:
            work.mkdir()
            raise RuntimeError("boom")
    assert not out.exists() and leftovers(tmp_path) == []


def test_refuses_existing_without_force(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    with pytest.raises(SpecmlxError, match="already exists.*--force"):
        with staged_path(out):
            pass


def test_force_replaces(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "old").write_text("old")
    with staged_path(out, force=True) as work:
        work.mkdir()
        (work / "new").write_text("new")
    assert [p.name for p in out.iterdir()] == ["new"]
    assert leftovers(tmp_path) == []


def test_conversion_failing_midway_leaves_nothing(tiny_gguf, tmp_path, monkeypatch):
    real = gguf_convert.iter_hf_tensors

    def failing(*args):
        for i, item in enumerate(real(*args)):
            if i == 5:
                raise OSError("disk full (injected)")
            yield item

    monkeypatch.setattr(gguf_convert, "iter_hf_tensors", failing)
    out = tmp_path / "out" / "model"
    with pytest.raises(OSError, match="injected"):
        convert(tiny_gguf("qwen2"), out, progress=False)
    assert not out.exists() and leftovers(out.parent) == []


def test_conversion_refuses_overwrite_before_any_work(tiny_gguf, tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "keep").write_text("keep")
    with pytest.raises(SpecmlxError, match="already exists"):
        convert(tiny_gguf("qwen2"), out, progress=False)
    assert (out / "keep").exists()
    convert(tiny_gguf("qwen2"), out, force=True, progress=False)
    assert not (out / "keep").exists() and (out / "config.json").exists()
