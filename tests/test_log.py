"""Internal errors: a sentence for the user, the traceback in the data directory's log."""

import pytest

from specmlx import log, paths
from specmlx.errors import SpecmlxError


@pytest.fixture
def data(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECMLX_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def test_a_user_error_passes_through_unlogged(data):
    err = SpecmlxError("the prompt is empty")
    assert log.user_error(err, "generating failed") is err
    assert not paths.log_path().exists()


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
