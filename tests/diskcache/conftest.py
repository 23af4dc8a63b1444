"""A store in the test's own folder, and the log lines it writes."""

from __future__ import annotations

import logging

import pytest

from specmlx.diskcache.fingerprint import Fingerprint
from specmlx.diskcache.store import DiskCache

FP = Fingerprint("models/tiny", "digest-1")


@pytest.fixture
def store(tmp_path):
    cache = DiskCache(tmp_path / "kept", cap_bytes=1 << 30)
    yield cache
    cache.close()


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def log_lines():
    """What the store logs (the `specmlx` logger does not propagate to pytest's own capture)."""
    handler = Lines()
    logger = logging.getLogger("specmlx.diskcache")
    logger.addHandler(handler)
    yield handler.lines
    logger.removeHandler(handler)
