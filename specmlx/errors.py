"""The one exception type users see, and how command lines report it."""

from __future__ import annotations

import sys
from typing import Callable


class SpecmlxError(Exception):
    """Bad input or an unusable model: the CLI prints it as one line and exits 2."""


def run_cli(prog: str, body: Callable[[], int]) -> int:
    """Run a command's body: errors become one line on stderr, never a traceback.

    Exit codes: 2 for SpecmlxError and system errors (disk full, permission
    denied, whose own message says enough), 130 for Ctrl-C.
    """
    try:
        return body()
    except (SpecmlxError, OSError) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\n{prog}: interrupted", file=sys.stderr)
        return 130
