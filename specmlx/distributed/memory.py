"""Will a rank's share fit? Asked before loading, from the checkpoint's tensor sizes.

A sharded rank holds its part of the decoder layers (mlx-lm's `shard()` splits
their projections, `pipeline()` hands out whole layers), but every rank keeps
the embedding table, the final norm and the output head whole. Rank 0 also
holds the drafter. So a rank needs layers / N + the rest (+ the drafter).
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecmlxError
from ..memory import GB, available_bytes, needed_bytes, weights_bytes

LAYER = re.compile(r"(?:^|\.)layers\.\d+\.")


@dataclass(frozen=True)
class Split:
    """A checkpoint's bytes: in its decoder layers (shared out) and the rest (kept whole)."""

    layers: int
    rest: int

    def share(self, ranks: int) -> int:
        return self.layers // ranks + self.rest


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
    return Split(layers, sum(sizes.values()) - layers)


def check_rank_fits(target: Path, drafter: Path | None, ranks: int, leads: bool,
                    available: int | None = None) -> None:
    """Raise SpecmlxError, saying how many ranks would fit, when this rank's share does not."""
    available = available_bytes() if available is None else available
    parts = split(target)
    drafter_w = weights_bytes(drafter) if drafter is not None and leads else 0
    need = needed_bytes(parts.share(ranks) + drafter_w)
    if need <= available:
        return
    fitting = next((n for n in range(ranks + 1, 257) if needed_bytes(parts.share(n) + drafter_w) <= available), None)
    advice = (f"{fitting} ranks would fit" if fitting is not None else
              f"no number of ranks fits: the embeddings and head alone need {needed_bytes(parts.rest + drafter_w) / GB:.1f} GB")
    held = f"1/{ranks} of the target's layers and its embeddings and head" + (" and the drafter" if drafter_w else "")
    raise SpecmlxError(f"this rank would hold {held}, about {need / GB:.1f} GB, but only "
                       f"{available / GB:.1f} GB is available; {advice}")
