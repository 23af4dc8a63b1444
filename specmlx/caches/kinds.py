"""The kinds of a single stream's cache layer, one class each, and `kind_of`: the one place a layer's
kind is read, once, when its stream is made (`stream.Stream`). Each kind also makes its batch form
(mlx-lm's `BatchKVCache`, `batch_quantized.py`'s, `batch_recurrent.py`'s), which `batch.py` joins rows into.

- `KV`: mlx-lm's `KVCache`; rows are positions, rewound by lowering an offset.
- `QuantizedKV`: mlx-lm's `QuantizedKVCache` (`--kv-bits`); rows are positions as for `KV`, each kept
  as its packed values and a scale and bias per group (mlx's affine quantization), rewound alike.
- `Recurrent`: a `RecurrentCache` (`recurrent.py`); a state, not positions, rewound by a replay.

Each says what the stream's verbs (`stream.py`, `snapshot.py`) need of a layer: its bytes, its bytes a
position, letting go of its arrays, holding a row's, copying a prefix, a span as named arrays and back; and
what the batch's (`batch.py`) need: a row joining its batch form, leaving it, and every row keeping its
own length after a forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping, Sequence

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache, KVCache, QuantizedKVCache

from ..errors import SpecmlxError
from ..kv_flags import KV_GROUP
from .batch_quantized import BatchQuantizedKVCache
from .batch_recurrent import BatchRecurrentCache
from .recurrent import RecurrentCache, is_recurrent

Arrays = dict[str, mx.array]


@dataclass(frozen=True)
class KVBits:
    """A target's attention layers' keys and values kept quantized (`--kv-bits`, `--kv-group-size`):
    `bits` a value, a scale and a bias per `group_size` values of a head (mlx's affine quantization)."""

    bits: int
    group_size: int = KV_GROUP

    def layer(self) -> QuantizedKVCache:
        return QuantizedKVCache(group_size=self.group_size, bits=self.bits)

    @property
    def label(self) -> str:
        """Its name where caches are told apart (a kind's `label`, the disk's fingerprint)."""
        return f"kv{self.bits}g{self.group_size}"


class KV:
    """A plain KV layer: keys and values (B, heads, positions, dim)."""

    positions = True  # its rows are positions: a prefix can be copied, a span kept by position
    recurrent = False  # a state, rewound by a replay of its recorded forwards
    batched = True  # a batch takes rows of it (`batch.BatchCache`)
    label = "kv"

    @staticmethod
    def parts(layer: Any) -> list[mx.array]:
        return [] if layer.keys is None else [layer.keys, layer.values]

    def nbytes(self, layer: Any) -> int:
        return sum(a.nbytes for a in self.parts(layer))

    def per_position(self, layer: Any) -> int:
        return sum(a.nbytes // a.shape[2] for a in self.parts(layer))

    def clear(self, layer: Any) -> None:
        layer.keys = layer.values = None
        layer.offset = 0

    def take(self, layer: Any, row: Any) -> None:
        """Hold `row`'s arrays and length (a layer of the same kind), by reference."""
        layer.keys, layer.values, layer.offset = row.keys, row.values, row.offset

    def copy(self, layer: Any, source: Any, length: int) -> None:
        """Hold `source`'s first `length` positions in buffers of its own."""
        self.clear(layer)
        layer.update_and_fetch(source.keys[..., :length, :], source.values[..., :length, :])

    def names(self, prefix: str, i: int) -> tuple[str, ...]:
        """The names a span of layer `i` is kept under."""
        return f"{prefix}.{i}.keys", f"{prefix}.{i}.values"

    def capture(self, layer: Any, start: int, end: int, prefix: str, i: int) -> Arrays:
        return {name: mx.contiguous(part[..., start:end, :]) for name, part in zip(self.names(prefix, i), self.parts(layer))}

    def restore(self, layer: Any, blocks: Sequence[Mapping[str, mx.array]], prefix: str, i: int) -> None:
        layer.update_and_fetch(*(mx.concatenate([b[name] for b in blocks], axis=2) for name in self.names(prefix, i)))

    def join(self, layer: Any, one: Any, length: int) -> Any:
        """The batch layer with `one` (holding its row's `length` positions) as its last row, copied:
        `layer` extended, or the row alone where there is none yet (the first row's)."""
        row = self.row(one)
        if layer is None:
            return row
        layer.extend(row)
        return layer

    @staticmethod
    def row(one: Any) -> Any:
        """`one`'s positions as a batch of one row."""
        return BatchKVCache.merge([one]) if one.keys is not None else BatchKVCache([0])

    def leave(self, layer: Any, row: int, start: int, end: int, length: int) -> Any:
        """Row `row`'s positions `start:end` (past its left padding) as a single row's layer holding `length`."""
        one = KVCache()
        if layer.keys is not None and length:
            one.keys = mx.contiguous(layer.keys[row : row + 1, :, start:end])
            one.values = mx.contiguous(layer.values[row : row + 1, :, start:end])
            one.offset = length
        return one

    def keep(self, layer: Any, excess: Sequence[int], common: int, roll: Sequence[int]) -> None:
        """Row i drops its last `excess[i]` positions: `common` of them by an O(1) trim every row shares,
        the rest by rolling each row's own tail into its left padding (a copy)."""
        layer.trim(common)
        if max(roll):
            layer.prepare(right_padding=list(roll))
            layer.finalize()


class QuantizedKV(KV):
    """A quantized KV layer: keys and values each (packed, scales, biases), every part by position."""

    def __init__(self, bits: int = 8, group_size: int = 64) -> None:
        self.bits, self.group_size = bits, group_size
        self.label = KVBits(bits, group_size).label

    @staticmethod
    def parts(layer: Any) -> list[mx.array]:
        return [] if layer.keys is None else [*layer.keys, *layer.values]

    def copy(self, layer: Any, source: Any, length: int) -> None:
        """The packed rows themselves: quantizing dequantized rows again need not give them back."""
        layer.keys, layer.values = ([mx.contiguous(p[..., :length, :]) for p in parts] for parts in (source.keys, source.values))
        layer.offset = length

    def names(self, prefix: str, i: int) -> tuple[str, ...]:
        """Named by its bits and group size too: a span kept at one setting never restores at another."""
        return tuple(f"{prefix}.{i}.{what}.q{self.bits}g{self.group_size}.{j}" for what in ("keys", "values")
                     for j in range(3))

    def restore(self, layer: Any, blocks: Sequence[Mapping[str, mx.array]], prefix: str, i: int) -> None:
        parts = [mx.concatenate([b[name] for b in blocks], axis=2) for name in self.names(prefix, i)]
        layer.keys, layer.values, layer.offset = parts[:3], parts[3:], parts[0].shape[2]

    @staticmethod
    def row(one: Any) -> Any:
        """Its packed rows themselves (quantized again, they need not come back the same)."""
        return BatchQuantizedKVCache.merge(one)

    def leave(self, layer: Any, row: int, start: int, end: int, length: int) -> Any:
        return layer.extract(row, start, end, length)


class Recurrent:
    """A recurrent layer's state (`RecurrentCache`): not positions; kept whole where it is held."""

    positions = False
    recurrent = True
    batched = True
    label = "recurrent"

    def nbytes(self, layer: Any) -> int:
        return layer.nbytes  # its state, its marks' and its checkpoint's, its records

    def per_position(self, layer: Any) -> int:
        return 0

    def clear(self, layer: Any) -> None:
        layer.hold([None] * len(layer.cache), 0)  # its checkpoint stays, for the positions it will hold again

    def take(self, layer: Any, row: Any) -> None:
        layer.hold(row.cache, row.offset)

    def names(self, prefix: str, i: int) -> tuple[str, ...]:
        return ()

    def capture(self, layer: Any, start: int, end: int, prefix: str, i: int) -> Arrays:
        """The state after `end` positions, where the layer holds one there (else nothing: the span then
        ends no restored prefix, `snapshot.restorable`)."""
        return {f"{prefix}.{i}.state.{j}": slot for j, slot in enumerate(layer.state_at(end) or ()) if slot is not None}

    def restore(self, layer: Any, blocks: Sequence[Mapping[str, mx.array]], prefix: str, i: int) -> None:
        last, length = blocks[-1], int(blocks[-1][f"{prefix}.span"][1].item())
        layer.hold([last.get(f"{prefix}.{i}.state.{j}") for j in range(len(layer.cache))], length)

    def join(self, layer: Any, one: Any, length: int) -> Any:
        """Its row's state, which must be the state after `length` positions (a state cannot be cut)."""
        if one.offset != length:
            raise SpecmlxError(f"a recurrent layer holds {one.offset} positions, not {length}")
        layer = layer if layer is not None else BatchRecurrentCache(len(one.cache))
        layer.join(one.cache)
        return layer

    def leave(self, layer: Any, row: int, start: int, end: int, length: int) -> Any:
        one = RecurrentCache(len(layer.cache))
        one.hold(layer.row(row), length)
        return one

    def keep(self, layer: Any, excess: Sequence[int], common: int, roll: Sequence[int]) -> None:
        layer.keep(excess)  # each row's own, by a replay of the forward


class Window(KV):
    """Another trimmable layer of keys and values (mlx-lm's `ChunkedKVCache`, Llama 4's): its bytes are
    counted, it is emptied and handed rows as a KV layer is, but its rows need not be the positions from
    the first (a chunked window drops the oldest), so no prefix of it is copied or kept on disk."""

    positions = False
    batched = False  # mlx-lm's batch forms do not drop a window's oldest rows
    label = "window"


KV_KIND, RECURRENT, WINDOW = KV(), Recurrent(), Window()


def kind_of(layer: Any) -> KV | Recurrent:
    """A single stream's layer's kind; a layer of keys and values of another kind is a `Window`, and one
    without them is refused in one line."""
    if is_recurrent(layer):
        return RECURRENT
    if type(layer) is QuantizedKVCache:
        return _quantized(layer.bits, layer.group_size)
    if type(layer) is KVCache:
        return KV_KIND
    if hasattr(layer, "keys"):
        return WINDOW
    raise SpecmlxError(f"a {type(layer).__name__} is not a cache layer the engine keeps")


@lru_cache(maxsize=None)
def _quantized(bits: int, group_size: int) -> QuantizedKV:
    """One `QuantizedKV` a setting: a layer's kind is read without making one each time."""
    return QuantizedKV(bits, group_size)
