"""Will a rank's share fit? Asked before loading, from the checkpoint's tensor sizes.

A sharded rank holds its part of the decoder layers (mlx-lm's `shard()` splits
their projections, `pipeline()` hands out whole layers), its part of the
embeddings and head when they are split by vocabulary (`vocab.py`), else them
whole, and the few small tensors that stay whole (norms). Rank 0 also holds
the drafter.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..errors import SpecmlxError
from ..memory import GB, available_bytes, needed_bytes, weights_bytes

LAYER = re.compile(r"(?:^|\.)layers\.\d+\.")
LAYER_NUMBER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
VOCAB = re.compile(r"(?:^|\.)(embed_tokens|lm_head)\.")


@dataclass(frozen=True)
class Split:
    """A checkpoint's bytes: in its `count` decoder layers, its embeddings and head, and the rest."""

    layers: int
    vocab: int
    rest: int
    count: int = 1

    def share(self, ranks: int, vocab_split: bool, pipeline: bool = False) -> int:
        """What the largest of `ranks` shares holds. Tensor parallelism splits every layer;
        pipeline stages get whole layers, the first ranks (rank 0 among them) one more
        when they do not divide evenly."""
        layers = self.layers * -(-self.count // ranks) // self.count if pipeline else -(-self.layers // ranks)
        return layers + (-(-self.vocab // ranks) if vocab_split else self.vocab) + self.rest

    @property
    def whole(self) -> int:
        return self.layers + self.vocab + self.rest


def tensor_bytes(path: Path) -> dict[str, int]:
    """Each tensor's size, from the safetensors headers alone (no weights read)."""
    sizes = {}
    for file in sorted(Path(path).glob("*.safetensors")):
        with open(file, "rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(length))
        for name, info in header.items():
            if name != "__metadata__":
                start, end = info["data_offsets"]
                sizes[name] = end - start
    return sizes


def split(path: Path) -> Split:
    sizes = tensor_bytes(path)
    layers = sum(n for name, n in sizes.items() if LAYER.search(name))
    vocab = sum(n for name, n in sizes.items() if VOCAB.search(name) and not LAYER.search(name))
    count = len({m.group(1) for name in sizes if (m := LAYER_NUMBER.search(name))})
    return Split(layers, vocab, sum(sizes.values()) - layers - vocab, max(count, 1))


def check_rank_fits(target: Path, drafters: Sequence[Path], ranks: int, vocab_split: bool,
                    pipeline: bool = False, available: int | None = None) -> None:
    """Raise SpecmlxError, saying how many ranks would fit, when this rank's share
    (with the `drafters`' weights, on rank 0) does not."""
    available = available_bytes() if available is None else available
    parts = split(target)
    drafter_w = sum(weights_bytes(d) for d in drafters)

    def need(n: int) -> int:
        return needed_bytes(parts.share(n, vocab_split, pipeline) + drafter_w)

    if need(ranks) <= available:
        return
    fitting = next((n for n in range(ranks + 1, 257) if need(n) <= available), None)
    advice = f"{fitting} ranks would fit" if fitting is not None else "no number of ranks up to 256 fits"
    held = f"1/{ranks} of the target" + ("" if vocab_split else " with its embeddings and head whole") + (
        " and the drafter" if drafter_w else "")
    raise SpecmlxError(f"this rank would hold {held}, about {need(ranks) / GB:.1f} GB, but only "
                       f"{available / GB:.1f} GB is available; {advice}")
