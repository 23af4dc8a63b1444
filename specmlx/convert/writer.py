"""Write weights tensor by tensor into safetensors shards, as mlx-lm's loader reads them.

Only the current shard is held in memory (in the output dtype), so converting a 1.5B model
to float32 never keeps two full copies of it.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np

from specmlx.convert.options import OutputFormat

DEFAULT_SHARD_BYTES = 2 << 30
INDEX_NAME = "model.safetensors.index.json"


class ShardWriter:
    """Collects tensors into shards of at most `max_shard_bytes` and names them when closed."""

    def __init__(self, out_dir: Path, fmt: OutputFormat, max_shard_bytes: int | None = None):
        self.out_dir = Path(out_dir)
        self.fmt = fmt
        self.max_shard_bytes = max_shard_bytes or DEFAULT_SHARD_BYTES
        self._dtype = getattr(mx, fmt.dtype)
        self._pending: dict[str, mx.array] = {}
        self._pending_bytes = 0
        self._written: list[tuple[Path, list[str]]] = []
        self.total_bytes = 0

    def add(self, name: str, data: np.ndarray) -> None:
        """Cast (and maybe quantize) one tensor and queue it; a full shard is written first."""
        arrays = self._convert(name, data)
        size = sum(a.nbytes for a in arrays.values())
        if self._pending and self._pending_bytes + size > self.max_shard_bytes:
            self.flush()
        self._pending.update(arrays)
        self._pending_bytes += size
        self.total_bytes += size

    def flush(self) -> None:
        """Write the queued tensors as one shard file."""
        if not self._pending:
            return
        path = self.out_dir / f"shard-{len(self._written):05d}.partial.safetensors"
        mx.save_safetensors(str(path), self._pending, metadata={"format": "mlx"})
        self._written.append((path, sorted(self._pending)))
        self._pending, self._pending_bytes = {}, 0

    def close(self) -> list[Path]:
        """Write the last shard, give shards their final names and write the index."""
        self.flush()
        count = len(self._written)
        weight_map, files = {}, []
        for i, (path, names) in enumerate(self._written):
            final = self.out_dir / ("model.safetensors" if count == 1 else f"model-{i + 1:05d}-of-{count:05d}.safetensors")
            path.rename(final)
            files.append(final)
            weight_map.update({n: final.name for n in names})
        index = {"metadata": {"total_size": self.total_bytes}, "weight_map": dict(sorted(weight_map.items()))}
        (self.out_dir / INDEX_NAME).write_text(json.dumps(index, indent=4))
        return files

    def _convert(self, name: str, data: np.ndarray) -> dict[str, mx.array]:
        weight = mx.array(data).astype(self._dtype)
        if self._quantizable(name, data):
            wq, scales, biases = mx.quantize(weight, group_size=self.fmt.q_group_size, bits=self.fmt.q_bits)
            stem = name[: -len("weight")]
            arrays = {name: wq, stem + "scales": scales, stem + "biases": biases}
        else:
            arrays = {name: weight}
        # Evaluate now so the numpy source can be freed and no lazy graph keeps it alive.
        mx.eval(*arrays.values())
        return arrays

    def _quantizable(self, name: str, data: np.ndarray) -> bool:
        # mlx-lm quantizes a Linear/Embedding whose checkpoint holds `<path>.scales`; every 2-D
        # weight of the supported models is one, and the last dim must split into groups.
        return (
            self.fmt.quantized
            and name.endswith(".weight")
            and data.ndim == 2
            and data.shape[-1] % self.fmt.q_group_size == 0
        )
