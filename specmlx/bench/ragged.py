"""`python -m specmlx.bench.ragged`: what the ragged rewind costs against the round it follows.

After each batched round every row keeps its own number of tokens. The part
every row drops is an O(1) trim; the rest is a roll of the whole cache
(`BatchCache.keep`), a copy. This times, on the real target, a verify
forward of `--rows` rows of `--width` positions over `--context` tokens each,
and that roll, each evaluated alone, interleaved `--repeats` times, and
prints the medians and their ratio. A round folds the roll into its own
graph, so the ratio is an upper bound of what it adds. A hybrid target's
forward is recorded as a round records it, and its rewind also replays each
row's accepted positions into its recurrent layers (`caches/batch_recurrent.py`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from time import perf_counter
from typing import Sequence

import mlx.core as mx

from ..caches.stream import make_cache
from ..cli import run_cli
from ..hidden import decoder, embeddings
from ..loading import load_models
from ..drafters import NONE
from ..caches.replay import recording
from ..caches.batch import BatchCache


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m specmlx.bench.ragged", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", help="a preset name, model directory or repo id (default: the default preset)")
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--context", type=int, default=512, help="tokens each row holds (default 512)")
    p.add_argument("--width", type=int, default=5, help="positions a round feeds a row: 1 + k (default 5)")
    p.add_argument("--repeats", type=int, default=5)
    return p


def filled(target, rows: int, context: int) -> BatchCache:
    """A batch of `rows` rows of `context` random tokens each, a row's length apart by one."""
    cache = BatchCache(len(make_cache(target)))
    for i in range(rows):
        one = make_cache(target)
        tokens = mx.random.randint(0, min(1000, embeddings(target).weight.shape[0]), (1, context - i), dtype=mx.uint32)
        decoder(target, tokens, one)
        mx.eval([c.state for c in one])
        cache.join(one, context - i)
    return cache


def timed(fn) -> float:
    began = perf_counter()
    fn()
    return perf_counter() - began


def measure(target, rows: int, context: int, width: int, repeats: int) -> tuple[float, float]:
    """Medians of the verify forward's and the ragged rewind's seconds, each evaluated alone, interleaved."""
    cache = filled(target, rows, context)
    rounds, rewinds = [], []
    for _ in range(repeats):
        lengths = list(cache.lengths)

        def forward() -> None:
            fed = mx.zeros((rows, width), dtype=mx.uint32)
            with recording(target, cache):
                mx.eval(decoder(target, fed, cache.layers), [c.state for c in cache.layers])
            cache.grown(width)

        def rewind() -> None:  # row i keeps i % width of the fed positions: every row differs
            cache.keep([n + i % width for i, n in enumerate(lengths)])
            mx.eval([c.state for c in cache.layers])

        rounds.append(timed(forward))
        rewinds.append(timed(rewind))
    return statistics.median(rounds), statistics.median(rewinds)


def bench(args: argparse.Namespace) -> int:
    target = load_models(args.target, [NONE], lambda s: print(f"{s}...", file=sys.stderr)).target.model
    rnd, rew = measure(target, args.rows, args.context, args.width, args.repeats)
    print(f"{args.rows} rows x {args.context} tokens, {args.width} positions a row: verify forward "
          f"{rnd * 1e3:.1f} ms, ragged rewind {rew * 1e3:.1f} ms ({100 * rew / rnd:.1f}% of the forward), "
          f"median of {args.repeats}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_cli("specmlx bench ragged", lambda: bench(args))


if __name__ == "__main__":
    from ..blas import ensure_fast_blas

    ensure_fast_blas()
    sys.exit(main())
