"""The target's hidden states over a corpus, saved once, read by every epoch.

The target's forward is the slow part of training (tens of tokens/s on a CPU),
so its final hidden states are stored (float16) in numbered shards next to
their tokens. Collection resumes at the first missing shard.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import mlx.core as mx
import mlx.nn as nn
from tqdm import tqdm

from ..hidden import decoder

WINDOWS_PER_SHARD = 4


@dataclass(frozen=True)
class Shard:
    tokens: mx.array  # (W, L) int32
    hidden: mx.array  # (W, L, H) float16: the target's final-normed hidden states


def shard_path(folder: Path, index: int) -> Path:
    return folder / f"shard-{index:05d}.safetensors"


def shard_count(folder: Path) -> int:
    return sum(1 for _ in itertools.takewhile(lambda i: shard_path(folder, i).exists(), itertools.count()))


def collect(
    target: nn.Module, windows: Iterator[list[int]], folder: Path, tokens: int, progress: bool = True
) -> int:
    """Save hidden states until `folder` holds at least `tokens` tokens; returns shards."""
    folder.mkdir(parents=True, exist_ok=True)
    done = shard_count(folder)
    first = next(windows, None)
    if first is None:
        return done
    per_shard = WINDOWS_PER_SHARD * len(first)
    wanted = -(-tokens // per_shard)
    windows = itertools.chain([first], windows)
    # Skip what earlier runs saved: the corpus order is seeded, so it is the same.
    batches = itertools.islice(_batched(windows, WINDOWS_PER_SHARD), done, wanted)
    bar = tqdm(total=wanted * per_shard, initial=done * per_shard, unit="tok",
               desc="target hidden states", disable=not progress)
    for index, batch in enumerate(batches, start=done):
        tokens_array = mx.array(batch, dtype=mx.int32)
        hidden = mx.concatenate([decoder(target, row[None], None) for row in tokens_array])
        temp = shard_path(folder, index).with_suffix(".partial.safetensors")
        mx.save_safetensors(str(temp), {"tokens": tokens_array, "hidden": hidden.astype(mx.float16)})
        temp.replace(shard_path(folder, index))  # a killed run never leaves half a shard
        bar.update(per_shard)
    bar.close()
    return max(done, wanted)


def load_shard(folder: Path, index: int) -> Shard:
    arrays = mx.load(str(shard_path(folder, index)))
    return Shard(arrays["tokens"], arrays["hidden"])


def _batched(items: Iterator[Any], size: int) -> Iterator[list[Any]]:
    while batch := list(itertools.islice(items, size)):
        if len(batch) == size:
            yield batch
