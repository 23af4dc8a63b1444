"""The `--distributed` flags every command shares, joining the group from them, and where they place the models."""

from __future__ import annotations

import argparse
from contextlib import contextmanager
from typing import Iterator

from ..loading import ONE_PROCESS, Placement
from .group import Group, join, link_errors
from .load import AUTO, SHARDINGS, Ranks
from .output import backend_to_log
from .watchdog import PEER_TIMEOUT


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--distributed", action="store_true",
                        help="shard the target across the ranks mlx.launch started (e.g. mlx.launch --backend ring "
                        "-n 2 -- python -m specmlx ...); rank 0 drafts, prints and writes, the others follow it")
    parser.add_argument("--sharding", choices=SHARDINGS, default=AUTO,
                        help="with --distributed: tensor parallel (mlx-lm's shard()), pipeline (pipeline()), or "
                        "auto: tensor where the architecture has it, else pipeline (default)")
    parser.add_argument("--peer-timeout", type=float, default=PEER_TIMEOUT, metavar="S",
                        help="with --distributed: stop, with one line, when a wait for the other ranks "
                        f"lasts S seconds (default {PEER_TIMEOUT:.0f}; waiting for a request is not timed)")


@contextmanager
def joined(args: argparse.Namespace) -> Iterator[Group | None]:
    """This rank's group with --distributed (a lost peer becomes one line, the backend's
    own lines go to the log file), else None."""
    if not args.distributed:
        yield None
        return
    group = join(args.peer_timeout)
    backend_to_log(group.name())
    try:
        with link_errors(group):
            yield group
    except BaseException:
        group.leave(clean=False)  # the others see this rank go when it has said why (they may be waiting)
        raise
    group.leave(clean=True)


def placement(args: argparse.Namespace, group: Group | None) -> Placement:
    """Where `specmlx.loading.load_models` puts the models: this process, or with
    --distributed a shard of the target on each rank, sharded by --sharding."""
    return ONE_PROCESS if group is None else Ranks(group, args.sharding)


def leads(group: Group | None) -> bool:
    """Whether this process prints and writes: a single process, or rank 0."""
    return group is None or group.leads


__all__ = ["add_arguments", "joined", "leads", "placement"]
