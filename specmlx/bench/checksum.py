"""What checking a kept block's checksum costs a restore: `python -m specmlx.bench.checksum`.

A block of the default pair's shapes (the 1.5B target's 28 layers and the 0.5B drafter's 24, K and V
for 256 positions, float32 as on this CPU: 21 MB) written as the disk cache writes it; then, in
turn, its checksum (`diskcache.store`, what every restore reads a block through) and its load, each
timed with the file in the page cache, so what is timed is the CPU's work and not the disk's.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from time import perf_counter
from typing import Sequence

import mlx.core as mx

from ..diskcache.blocks import BLOCK
from ..diskcache.store import checksum

# (layers, KV heads, head width) of the default pair: the 1.5B target, the 0.5B drafter.
SHAPES = {"target": (28, 2, 128), "drafter": (24, 2, 64)}


def block_arrays() -> dict[str, mx.array]:
    return {f"{role}.{i}.{kv}": mx.random.normal((1, heads, BLOCK, width))
            for role, (layers, heads, width) in SHAPES.items() for i in range(layers) for kv in ("keys", "values")}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specmlx.bench.checksum", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=9, help="timings of each, medians printed (default 9)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "block.safetensors"
        mx.save_safetensors(str(path), block_arrays())
        check, load = [], []
        for _ in range(args.repeats):  # alternated, so that drift hits both
            start = perf_counter()
            checksum(path)
            check.append(perf_counter() - start)
            start = perf_counter()
            mx.eval(list(mx.load(str(path)).values()))
            load.append(perf_counter() - start)
        size = path.stat().st_size
    print(f"a block of {size / 1e6:.1f} MB: checksum {1000 * statistics.median(check):.1f} ms, "
          f"load {1000 * statistics.median(load):.1f} ms (medians of {args.repeats}, the file in the page cache)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
