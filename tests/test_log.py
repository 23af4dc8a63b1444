"""Internal errors: a sentence for the user, the traceback in the data directory's log."""

import sys

import pytest

from specmlx import log
from specmlx.errors import SpecmlxError, run_cli


@pytest.fixture
def data(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECMLX_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def test_the_data_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECMLX_DATA_DIR", str(tmp_path / "x"))
    assert log.data_dir() == tmp_path / "x"
    monkeypatch.delenv("SPECMLX_DATA_DIR")
    if sys.platform.startswith("linux"):
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
        assert log.data_dir() == tmp_path / "xdg" / "specmlx"


def test_a_user_error_passes_through_unlogged(data):
    err = SpecmlxError("the prompt is empty")
    assert log.user_error(err, "generating failed") is err
    assert not log.log_path().exists()


def failing():
    raise KeyError("internal_detail_xyz")


def test_an_internal_error_is_a_sentence_and_its_traceback_is_logged(data):
    try:
        failing()
    except KeyError as err:
        shown = str(log.user_error(err, "the answer failed"))
    assert shown.startswith("the answer failed: an internal error (KeyError; details in ")
    assert str(data / "specmlx.log") in shown and "internal_detail_xyz" not in shown
    logged = (data / "specmlx.log").read_text()
    assert "Traceback" in logged and "in failing" in logged and "internal_detail_xyz" in logged


def test_a_command_line_bug_is_one_line_and_exit_1(data, capsys):
    assert run_cli("specmlx generate", failing) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("specmlx generate: error: generate failed: an internal error")
    assert "Traceback" not in err and "Traceback" in (data / "specmlx.log").read_text()
