"""What sharding costs: each rank's memory, and the collectives' time, measured on the group.

Every rank calls these at the same point (they are collectives themselves);
rank 0 gets every rank's figures.
"""

from __future__ import annotations

import resource
import sys
from time import perf_counter

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from .group import Group

KB = 1 << 10


def peak_rss() -> int:
    """This process's peak resident memory, in bytes (Linux reports kB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def memory(group: Group, target: nn.Module) -> list[dict]:
    """Per rank: the target's parameters it holds, MLX's peak and the process's peak resident memory (KiB)."""
    held = sum(v.nbytes for _, v in tree_flatten(target.parameters()))
    mine = mx.array([held // KB, mx.get_peak_memory() // KB, peak_rss() // KB], dtype=mx.int32)
    every = mx.distributed.all_gather(mine[None], group=group.group, stream=mx.cpu)
    return [dict(zip(("target_kb", "mlx_peak_kb", "peak_rss_kb"), row)) for row in every.tolist()]


def collective_ms(group: Group, shape: tuple[int, ...], dtype=mx.int32, repeats: int = 50) -> float:
    """Mean milliseconds of one all_sum of `shape` that the host waits for (latency plus transfer)."""
    x = mx.zeros(shape, dtype=dtype)
    mx.eval(mx.distributed.all_sum(x, group=group.group, stream=mx.cpu))  # connections warm
    start = perf_counter()
    for _ in range(repeats):
        mx.eval(mx.distributed.all_sum(x, group=group.group, stream=mx.cpu))
    return 1000 * (perf_counter() - start) / repeats
