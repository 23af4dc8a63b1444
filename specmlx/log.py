"""Where internal errors go: a log file under the data directory, not the screen.

A user sees one sentence that says what failed and where the details are;
the traceback, which helps whoever fixes the bug, is appended to the log.
"""

from __future__ import annotations

import logging
from logging.handlers import RotatingFileHandler

from .errors import SpecmlxError
from .paths import log_path


def _logger() -> logging.Logger:
    logger = logging.getLogger("specmlx")
    path = log_path()
    if not any(getattr(h, "baseFilename", None) == str(path) for h in logger.handlers):
        for old in [h for h in logger.handlers if isinstance(h, RotatingFileHandler)]:
            logger.removeHandler(old)  # the data directory moved (tests, a new $SPECMLX_DATA_DIR)
            old.close()
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = RotatingFileHandler(path, maxBytes=1_000_000, backupCount=2, encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False  # never echoed to stderr by a root handler
    return logger


def user_error(err: BaseException, doing: str) -> SpecmlxError:
    """`err` as a user sees it. A SpecmlxError already speaks to the user and
    passes through; anything else is logged with its traceback and becomes
    "`doing`: an internal error (details in LOG)"."""
    if isinstance(err, SpecmlxError):
        return err
    try:
        _logger().error("%s", doing, exc_info=(type(err), err, err.__traceback__))
        where = f"details in {log_path()}"
    except OSError:  # an unwritable data directory must not hide the first error
        where = "the log file could not be written"
    return SpecmlxError(f"{doing}: an internal error ({type(err).__name__}; {where})")


def note(message: str) -> None:
    """One line in the log: something a user's request met that it survived (a model's malformed
    output, say), worth knowing when its answer looks wrong."""
    try:
        _logger().warning("%s", message)
    except OSError:  # an unwritable data directory must not fail the request that noted it
        pass
