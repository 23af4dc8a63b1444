"""The one exception type users see, and its one-line form.

A leaf: it imports nothing of specmlx, so every module may raise its error.
How a command line reports it is `specmlx.cli.run_cli`.
"""

from __future__ import annotations


class SpecmlxError(Exception):
    """Bad input or an unusable model: the CLI prints it as one line and exits 2."""


def first_line(err: BaseException, last: bool = False) -> str:
    """One line of a library's error (the first, or the last for tracebacks
    relayed as text), or its type when it says nothing."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    if not last and len(lines) > 1 and lines[0].endswith(":"):  # a heading of a list (mlx's "Missing 2 parameters:")
        return f"{lines[0]} {', '.join(lines[1:4])}{', ...' if len(lines) > 4 else ''}"
    return (lines[-1] if last else lines[0]) if lines else type(err).__name__
