"""The target's hidden states, saved once, read by every epoch.

The target's forward is the slow part of training (tens of tokens/s on a CPU),
so its final hidden states are stored (float16) in numbered shards next to
their tokens and a mask of what each position is. Hidden states come either
with the window (kept while the target generated it) or from a prefill here.
Collection resumes at the first missing shard.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import mlx.core as mx
import mlx.nn as nn
from tqdm import tqdm

from ..errors import SpecmlxError
from ..hidden import decoder_taps

WINDOWS_PER_SHARD = 4
PAD, CONTEXT, ANSWER = 0, 1, 2  # mask values: no token, a token of the request, a token of the answer


@dataclass(frozen=True)
class Window:
    tokens: list[int]  # exactly the window length; padding at the end
    mask: list[int]  # PAD, CONTEXT or ANSWER per position
    hidden: mx.array | None = None  # (L, H); None: the target computes it
    taps: mx.array | None = None  # (L, T, H): what enters each tapped layer, kept with `hidden`


@dataclass(frozen=True)
class Shard:
    tokens: mx.array  # (W, L) int32
    hidden: mx.array  # (W, L, H) float16: the target's final-normed hidden states
    mask: mx.array  # (W, L) uint8
    taps: mx.array | None = None  # (W, L, T, H) float16: what enters each of the `layers`
    layers: tuple[int, ...] = ()  # the target layers tapped (EAGLE-3's low, middle and high)


def shard_path(folder: Path, index: int) -> Path:
    return folder / f"shard-{index:05d}.safetensors"


def shard_count(folder: Path) -> int:
    return sum(1 for _ in itertools.takewhile(lambda i: shard_path(folder, i).exists(), itertools.count()))


def token_count(folder: Path, shards: int | None = None) -> int:
    """Real (not padding) tokens in the first `shards` shards (default: all)."""
    count = shard_count(folder) if shards is None else shards
    return sum(token_count_of(folder, i) for i in range(count))


def collect(
    target: nn.Module, make_windows: Callable[[int], Iterator[Window]], folder: Path, tokens: int,
    progress: bool = True, desc: str = "target hidden states", taps: tuple[int, ...] = (),
) -> int:
    """Save shards until `folder` holds at least `tokens` real tokens; returns the shard count.
    With `taps`, each shard also keeps what enters those target layers.

    `make_windows(skip)` yields the windows after the first `skip`: a rerun
    passes what earlier runs saved, so nothing is computed twice."""
    folder.mkdir(parents=True, exist_ok=True)
    done = shard_count(folder)
    saved = [load_shard(folder, i) for i in range(done)]
    have = sum(int((s.mask > PAD).sum().item()) for s in saved)
    kept = saved[0].layers if saved else tuple(taps)
    windows = sum(s.tokens.shape[0] for s in saved)  # a source's last shard may be short
    bar = tqdm(total=tokens, initial=min(have, tokens), unit="tok", desc=desc, disable=not progress,
               dynamic_ncols=True)
    del saved
    batches = _batched(make_windows(windows), WINDOWS_PER_SHARD)
    index = done
    while have < tokens and (batch := next(batches, None)) is not None:
        if kept != tuple(taps):  # a shard more would not match those saved
            raise SpecmlxError(f"{folder} keeps layers {list(kept) or 'none'}, not {list(taps) or 'none'}: "
                               "collect into a new --out, or ask for the same layers")
        tokens_array = mx.array([w.tokens for w in batch], dtype=mx.int32)
        states = [_states(target, w, tokens_array[i], taps) for i, w in enumerate(batch)]
        mask = mx.array([w.mask for w in batch], dtype=mx.uint8)
        arrays = {"tokens": tokens_array, "hidden": mx.stack([h for h, _ in states]).astype(mx.float16), "mask": mask}
        if taps:
            arrays["taps"] = mx.stack([t for _, t in states]).astype(mx.float16)
        temp = shard_path(folder, index).with_suffix(".partial.safetensors")
        mx.save_safetensors(str(temp), arrays, metadata={"layers": ",".join(map(str, taps))})
        temp.replace(shard_path(folder, index))  # a killed run never leaves half a shard
        real = int((mask > PAD).sum().item())
        have += real
        index += 1
        bar.update(min(real, max(tokens - bar.n, 0)))
    bar.close()
    return index


@dataclass(frozen=True)
class ShardRef:
    folder: Path
    index: int
    tokens: int  # real (not padding) tokens

    def load(self) -> Shard:
        return load_shard(self.folder, self.index)


@dataclass(frozen=True)
class TrainingSet:
    shards: tuple[ShardRef, ...]

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.shards)

    @property
    def windows(self) -> int:
        return len(self.shards) * WINDOWS_PER_SHARD

    def token_counts(self) -> Counter[int]:
        counts: Counter[int] = Counter()
        for ref in self.shards:
            shard = ref.load()
            counts.update(t for t, m in zip(shard.tokens.reshape(-1).tolist(), shard.mask.reshape(-1).tolist()) if m)
        return counts


@dataclass(frozen=True)
class Features:
    """OUT/features: answers to held-out requests, and the training sources."""

    root: Path

    @property
    def held_out(self) -> Path:
        return self.root / "held-out"

    @property
    def requests(self) -> Path:
        return self.root / "requests.jsonl"

    @property
    def answers(self) -> Path:
        return self.root / "answers"

    @property
    def text(self) -> Path:
        return self.root / "text"

    def training(self, limit: int | None = None, source: str = "mix", text_share: float = 0.5) -> TrainingSet:
        """The shards of `source` (answers, text, or mix: each next shard from the source
        furthest below its share, so a mix keeps its proportions at any size), up to `limit` tokens."""
        shares = {"answers": {self.answers: 1.0}, "text": {self.text: 1.0},
                  "mix": {self.answers: 1 - text_share, self.text: text_share}}[source]
        queues = {f: [ShardRef(f, i, token_count_of(f, i)) for i in range(shard_count(f))]
                  for f, share in shares.items() if share > 0}
        taken = dict.fromkeys(queues, 0)
        chosen: list[ShardRef] = []
        while any(queues.values()) and (limit is None or sum(taken.values()) < limit):
            folder = min((f for f in queues if queues[f]), key=lambda f: taken[f] / shares[f])
            ref = queues[folder].pop(0)
            chosen.append(ref)
            taken[folder] += ref.tokens
        return TrainingSet(tuple(chosen))

    def describe(self) -> str:
        parts = [f"{f.name} {token_count(f):,} tokens in {shard_count(f)} shards"
                 for f in (self.held_out, self.answers, self.text) if shard_count(f)]
        return f"{self.root}: " + ", ".join(parts)


def token_count_of(folder: Path, index: int) -> int:
    return int((load_shard(folder, index).mask > PAD).sum().item())


def load_shard(folder: Path, index: int) -> Shard:
    arrays, metadata = mx.load(str(shard_path(folder, index)), return_metadata=True)
    tokens = arrays["tokens"]
    mask = arrays.get("mask")
    if mask is None:  # shards from before masks: every position is text
        mask = mx.full(tokens.shape, ANSWER, dtype=mx.uint8)
    layers = tuple(int(i) for i in metadata.get("layers", "").split(",") if i)
    return Shard(tokens, arrays["hidden"], mask, arrays.get("taps"), layers)


def _states(target: nn.Module, window: Window, tokens: mx.array, taps: tuple[int, ...]
            ) -> tuple[mx.array, mx.array | None]:
    """A window's hidden states (and taps): kept while the target generated it, or computed here."""
    if window.hidden is not None:
        if taps and window.taps is None:
            raise SpecmlxError("this source keeps no tapped layers")
        return window.hidden, window.taps if taps else None
    hidden, tapped = decoder_taps(target, tokens[None], None, taps)
    return hidden[0], None if tapped is None else tapped[0]


def _batched(items: Iterator, size: int) -> Iterator[list]:
    """Lists of `size`, the last one shorter (a source's end); later shards line up for resuming."""
    while batch := list(itertools.islice(items, size)):
        yield batch
