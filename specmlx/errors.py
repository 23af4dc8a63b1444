"""The one exception type users see, and how command lines report it."""

from __future__ import annotations

import sys
from typing import Callable


class SpecmlxError(Exception):
    """Bad input or an unusable model: the CLI prints it as one line and exits 2."""


def first_line(err: BaseException, last: bool = False) -> str:
    """One line of a library's error (the first, or the last for tracebacks
    relayed as text), or its type when it says nothing."""
    lines = str(err).strip().splitlines()
    return (lines[-1] if last else lines[0]) if lines else type(err).__name__


def run_cli(prog: str, body: Callable[[], int]) -> int:
    """Run a command's body: errors become one line on stderr, never a traceback.

    Exit codes: 2 for SpecmlxError and system errors (disk full, permission
    denied, whose own message says enough), 1 for anything else (a bug: its
    traceback goes to the log file the line names), 130 for Ctrl-C.
    """
    try:
        return body()
    except (SpecmlxError, OSError) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\n{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - the user gets a sentence, the log the traceback
        from .log import user_error

        print(f"{prog}: error: {user_error(err, prog.removeprefix('specmlx ') + ' failed')}", file=sys.stderr)
        return 1
