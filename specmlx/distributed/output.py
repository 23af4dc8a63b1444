"""What the user sees of a rank: one line when it cannot go on, and none of the backend's own.

MLX's ring backend writes its socket errors straight to the process's standard error
(about 22 lines when a peer dies: "[ring] Socket 5 was closed by the peer", ...), with no
setting to turn them off. A rank's command line therefore points that descriptor at the log
file, and keeps Python's own `sys.stderr`, which carries specmlx's lines, on the terminal.
"""

from __future__ import annotations

import os
import sys
import time
from typing import NoReturn

from ..paths import log_path


def end(line: str, prog: str = "specmlx") -> NoReturn:
    """Stop this rank now, with one line and exit code 2. Nothing is waited for: another
    thread may be waiting in a collective that never returns, and MLX holds it."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):  # a closed or broken stdout must not hide the line
        pass
    print(f"{prog}: error: {line}", file=sys.stderr, flush=True)
    os._exit(2)


def backend_to_log(name: str) -> None:
    """From now on, what MLX's C++ code writes to standard error goes to the log file, marked
    with this rank's `name`; Python's `sys.stderr` stays where standard error was. Left as
    it is when the log file cannot be opened (the backend's lines are then seen, not lost)."""
    try:
        path = log_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        log = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        terminal = os.dup(2)
    except OSError:
        return
    sys.stderr.flush()
    os.dup2(log, 2)
    os.close(log)
    os.write(2, f"{time.strftime('%Y-%m-%d %H:%M:%S')} INFO {name} (pid {os.getpid()}): the distributed "
                "backend's own messages follow\n".encode())
    sys.stderr = open(terminal, "w", buffering=1, encoding=sys.stderr.encoding or "utf-8",
                      errors="backslashreplace")
