"""Joining the group of ranks that `mlx.launch` started, and losing it cleanly."""

from __future__ import annotations

import os
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ContextManager, Iterator

import mlx.core as mx

from ..errors import SpecmlxError
from .liveness import Liveness, PeerGone, leader_host
from .watchdog import PEER_TIMEOUT, Watchdog

LAUNCH = "mlx.launch --backend ring -n 2 -- python -m specmlx COMMAND --distributed ..."
# What mlx.launch sets for each backend: ring, JACCL, MPI, NCCL.
LAUNCHED = ("MLX_HOSTFILE", "MLX_IBV_DEVICES", "MLX_JACCL_COORDINATOR", "OMPI_COMM_WORLD_SIZE", "MLX_WORLD_SIZE",
            "NCCL_HOST_IP")


@dataclass(frozen=True)
class Group:
    """This process's place among the ranks. Rank 0 leads: it drafts, verifies,
    prints and listens; the others follow the rounds it announces."""

    group: Any  # mx.distributed.Group
    rank: int
    size: int
    watchdog: Watchdog | None = field(default=None, compare=False)
    liveness: Liveness | None = field(default=None, compare=False)

    @property
    def leads(self) -> bool:
        return self.rank == 0

    def name(self) -> str:
        return f"rank {self.rank} of {self.size}"

    def waiting(self) -> ContextManager[None]:
        """Wrap every wait on the other ranks: bounded by the watchdog, when there is one."""
        return self.watchdog.waiting() if self.watchdog is not None else nullcontext()

    def when_lost(self, handler: Callable[[PeerGone], None]) -> None:
        """Call `handler` when a peer's process ends, instead of ending this one with one line."""
        if self.liveness is not None:
            self.liveness.when_lost(handler)

    def leave(self, clean: bool) -> None:
        """This rank is done with the group; `clean`: it finished its part (see `Liveness.leave`)."""
        if self.liveness is not None:
            self.liveness.leave(clean)


def join(peer_timeout: float = PEER_TIMEOUT) -> Group:
    """The group `mlx.launch` set up, or one clear line when there is none. Every wait on the
    other ranks is bounded (`watchdog.py`), and a rank whose process ends is seen at once
    (`liveness.py`)."""
    if peer_timeout <= 0:
        raise SpecmlxError(f"--peer-timeout must be > 0 seconds, got {peer_timeout:g}")
    if not any(k in os.environ for k in LAUNCHED):
        raise SpecmlxError(f"--distributed needs ranks started by mlx.launch, e.g. {LAUNCH}")
    try:
        group = mx.distributed.init(strict=True)
    except RuntimeError as err:
        raise SpecmlxError(f"cannot join the distributed group: {str(err).strip()}") from None
    if group.size() < 2:
        raise SpecmlxError(f"--distributed found one rank only; start two or more: {LAUNCH}")
    name = f"rank {group.rank()} of {group.size()}"
    bounded = Group(group, group.rank(), group.size(), Watchdog(name, peer_timeout))
    with link_errors(bounded):  # a rank may die while the others connect
        return replace(bounded, liveness=connect_liveness(bounded))


def connect_liveness(group: Group) -> Liveness | None:
    """Every rank's connection to rank 0 that shows at once when a process ends (`liveness.py`)."""
    try:
        host = leader_host()
    except (OSError, ValueError, LookupError, TypeError) as err:
        raise SpecmlxError(f"{group.name()}: cannot read rank 0's address from $MLX_HOSTFILE: {err}") from None
    if host is None:
        return None

    def share(port: int) -> int:  # rank 0's port on every rank
        with group.waiting():
            return int(mx.distributed.all_sum(mx.array([port]), group=group.group, stream=mx.cpu).item())

    try:
        return Liveness.open(group.name(), group.rank, group.size, host, share, group.watchdog.timeout)
    except OSError as err:
        raise SpecmlxError(f"{group.name()}: cannot connect to the other ranks at {host} to watch them: "
                           f"{str(err) or type(err).__name__}") from None


def lost_link(err: BaseException) -> bool:
    """MLX's backends raise RuntimeError with their name in brackets when a peer goes away;
    the liveness connection, PeerGone."""
    text = str(err)
    return isinstance(err, PeerGone) or (
        isinstance(err, RuntimeError) and any(f"[{b}]" in text for b in ("ring", "jaccl", "mpi", "nccl")))


@contextmanager
def link_errors(group: Group) -> Iterator[None]:
    """A peer that died or hung up becomes one line naming this rank, not a traceback."""
    try:
        yield
    except RuntimeError as err:
        if not lost_link(err):
            raise
        raise SpecmlxError(f"{group.name()}: lost the other ranks ({str(err).strip()}); stopping") from None
