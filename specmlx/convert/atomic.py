"""Build an output directory or file beside its destination and move it into place only when done.

A conversion killed halfway (Ctrl-C, an exception, a full disk) leaves nothing at the
destination, and at most a hidden `.<name>.partial-*` directory that the next run does not read.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specmlx.errors import SpecmlxError


def check_destination(out: Path, force: bool) -> None:
    """Refuse an existing destination unless `force`."""
    if out.exists() and not force:
        raise SpecmlxError(f"{out} already exists (pass --force to replace it)")


@contextmanager
def staged_path(out: Path, force: bool = False) -> Iterator[Path]:
    """Yield a not-yet-existing path beside `out`; on success it replaces `out`, on error it is removed.

    The staging area is in the same directory as `out`, so the final step is a rename on one
    filesystem. The yielded path itself does not exist yet, because some writers (mlx-lm's
    convert) refuse an existing directory.
    """
    out = Path(out).absolute()
    check_destination(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        work = staging / out.name
        yield work
        if not work.exists():
            raise SpecmlxError(f"internal error: nothing was written for {out}")
        _replace(work, out, staging, force)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _replace(work: Path, out: Path, staging: Path, force: bool) -> None:
    if out.exists():
        check_destination(out, force)  # it may have appeared while we worked
        # Move the old one into the staging area first; the cleanup then deletes it.
        os.replace(out, staging / (out.name + ".old"))
    os.replace(work, out)
