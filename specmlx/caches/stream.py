"""A single stream's cache (`Stream`): mlx-lm's layers made rewindable, their kinds read once.

A rewind only lowers each KV layer's offset (mlx-lm's `trim`); nothing is
recomputed. Caches that cannot be rewound are swapped or refused up front, so
a rejected draft can never leave stale entries behind. A recurrent layer is
rewound by a replay (`recurrent.py`).
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Sequence

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import ArraysCache, CacheList, KVCache, RotatingKVCache, make_prompt_cache

from ..errors import SpecmlxError, first_line
from .kinds import KVBits, kind_of
from .recurrent import RENDERED_AGAIN, RecurrentCache

PREFILL_STEP = 512


def make_cache(model: nn.Module, name: str = "model", kv: KVBits | None = None) -> "Stream":
    """The model's mlx-lm cache, made rewindable; with `kv`, its attention layers' keys and values
    quantized (`kinds.KVBits`), refused in one line where the model's attention cannot read them so.

    A sliding-window layer's RotatingKVCache overwrites its oldest entries and
    so cannot be trimmed once full. A full KVCache keeps the whole window and
    stays exact, because mlx-lm's sliding layers also pass `window_size` to
    their attention mask. It costs memory linear in the context, not the window.
    A recurrent layer's ArraysCache becomes a `RecurrentCache`, rewound by restoring a kept state
    and replaying accepted positions (`recurrent.py`).
    """
    cache = [_rewindable(layer, kv) for layer in make_prompt_cache(model)]
    if kv is not None:
        _reads_quantized(model, name, kv)
    # A layer keeping several caches (a CacheList: Falcon-H1's attention beside Mamba, DeepSeek-V3.2's and
    # GLM-5's indexer keys beside the latent KV) has no single length to read, rewind or copy by.
    stuck = sorted({type(c).__name__ for c in cache if isinstance(c, CacheList) or not c.is_trimmable()})
    if stuck:
        kind = getattr(model, "model_type", type(model).__name__)
        raise SpecmlxError(
            f"{name} ({kind}) uses caches that cannot be rewound ({', '.join(stuck)}); "
            "speculative decoding needs KV caches or recurrent layers held in an ArraysCache"
        )
    return Stream(cache)


def refuse_recurrent(model: nn.Module, what: str) -> None:
    """Refuse, in one line, a model with recurrent layers where `what` does not rewind them yet."""
    if any(type(layer) is ArraysCache for layer in make_prompt_cache(model)):
        kind = getattr(model, "model_type", type(model).__name__)
        raise SpecmlxError(f"{what}: targets with recurrent layers ({kind}) are not supported yet; "
                           "one process runs them (`specmlx generate`, `serve`, the chat app)")


def _rewindable(layer: Any, kv: KVBits | None = None) -> Any:
    if isinstance(layer, RotatingKVCache) or type(layer) is KVCache:
        return KVCache() if kv is None else kv.layer()
    if type(layer) is ArraysCache:  # subclasses may keep more than slots a forward replaces
        return RecurrentCache(len(layer.cache))
    return layer


def _reads_quantized(model: nn.Module, name: str, kv: KVBits) -> None:
    """Refuse, in one line, a model whose attention cannot read quantized keys and values: one token
    is run lazily into such a cache (nothing is computed). Gemma 4's layers that share an earlier
    layer's keys read them without their cache, so not quantized; a head whose width the group size
    does not divide cannot be quantized by groups."""
    try:
        model(mx.array([[0]], dtype=mx.uint32), cache=[_rewindable(layer, kv) for layer in make_prompt_cache(model)])
    except (TypeError, ValueError, AttributeError) as err:
        kind = getattr(model, "model_type", type(model).__name__)
        raise SpecmlxError(f"{name} ({kind}) cannot keep its keys and values at {kv.bits} bits in groups of "
                           f"{kv.group_size}: {first_line(err)}") from None


def kv_bytes_per_token(model: nn.Module, kv: KVBits | None = None) -> int:
    """What a model's KV cache holds per token (kept as `kv` says), read from shapes alone: one token
    is run lazily and never evaluated, so this costs no forward (and no collective when sharded)."""
    return _one_token(model, kv).per_position()


def recurrent_bytes(model: nn.Module) -> int:
    """What a model's recurrent layers hold at any length (0 for a transformer), from shapes alone."""
    return sum(slot.nbytes for layer in _one_token(model).recurrent for slot in layer.cache if slot is not None)


def _one_token(model: nn.Module, kv: KVBits | None = None) -> "Stream":
    """A cache that one token was run into, lazily: its shapes are known, nothing is computed."""
    cache = make_cache(model, kv=kv)
    model(mx.array([[0]], dtype=mx.uint32), cache=cache)
    return cache


def resumes_at(prompt_length: int) -> int:
    """Where a chat's next turn after a prompt of this length may start to differ from it: its last
    `RENDERED_AGAIN` tokens (at most half of it) may be rendered anew. The one place that rule is
    written: a prefill keeps a recurrent checkpoint there, the disk keeps a block ending there, and a
    slot's conversation is continued by a prompt sharing it up to there."""
    return prompt_length - min(RENDERED_AGAIN, prompt_length // 2)


class Stream(list):
    """A single stream's cache: its layers, in the list mlx-lm's models take, and what their kinds say,
    read once when it is made (a layer's kind is its type's, which never changes): the verbs below read
    those answers, and no round scans the layers for them again."""

    def __init__(self, layers: Iterable[Any] = ()) -> None:
        super().__init__(layers)  # its layers are fixed from here: what it read of them stays true
        self.kinds = tuple(kind_of(layer) for layer in self)
        self.recurrent = tuple(layer for kind, layer in zip(self.kinds, self) if kind.recurrent)
        self.rewindable = bool(self.recurrent)  # its forwards are recorded, to be rewound by a replay
        # Every layer's rows are positions (a prefix of them can be copied), or a recurrent state besides
        # (a span of them can be kept on disk, `snapshot.py`): not a window's, whose oldest rows are dropped.
        self.copyable = all(kind.positions for kind in self.kinds)
        self.keepable = all(kind.positions or kind.recurrent for kind in self.kinds)
        self.labels = tuple(kind.label for kind in self.kinds)  # each layer's kind by name and setting

    def _fixed(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a stream's layers are fixed when it is made: make another Stream (a slice is a plain list)")

    __setitem__ = __delitem__ = __iadd__ = __imul__ = append = extend = insert = pop = remove = _fixed
    sort = reverse = _fixed

    @property
    def length(self) -> int:
        """How many tokens it holds."""
        return self[0].offset if self else 0

    def held_bytes(self) -> int:
        """What its layers hold in memory now (a recurrent layer: its state and checkpoint)."""
        return sum(kind.nbytes(layer) for kind, layer in zip(self.kinds, self))

    def per_position(self) -> int:
        """What it holds a position, from its layers' shapes (evaluated or not)."""
        return sum(kind.per_position(layer) for kind, layer in zip(self.kinds, self))

    def reachable(self, length: int) -> int:
        """The longest prefix of at most `length` positions every layer can hold (KV layers: any)."""
        while True:
            common = min([length, *(layer.reachable(length) for layer in self.recurrent)])
            if common == length:
                return length
            length = common

    def rewind(self, length: int) -> None:
        """Keep only the first `length` tokens; a no-op if it holds fewer. A recurrent layer may reach
        only fewer (`reachable`): then every layer holds that many, and the caller feeds the rest."""
        held = self.length
        length = self.reachable(min(length, held))
        if length < held or self.recurrent:  # a recurrent layer drops its marks even at its own length
            for layer in self:
                layer.trim(held - length)

    def clear(self) -> None:
        """Hold nothing: each layer lets go of its arrays (whoever else holds them keeps them); a
        recurrent layer keeps its checkpoint, for the positions it will hold again (a server slot)."""
        for kind, layer in zip(self.kinds, self):
            kind.clear(layer)

    def take_rows(self, rows: Sequence[Any]) -> None:
        """Each layer holds its row's arrays (a recurrent layer: its state) and length in place of its
        own: O(1), nothing is copied."""
        for kind, layer, row in zip(self.kinds, self, rows):
            kind.take(layer, row)

    def copy_prefix(self, source: "Stream", length: int) -> int:
        """Hold `source`'s first `length` positions in buffers of its own (a memory copy, not a forward);
        how many it holds: 0 where either is not `copyable`, or their kinds differ."""
        length = min(length, source.length)
        if length <= 0 or not (self.copyable and source.copyable) or self.labels != source.labels:
            return 0
        for kind, mine, theirs in zip(self.kinds, self, source):
            kind.copy(mine, theirs, length)
        mx.eval([c.state for c in self])
        return length

    def chunks(self, prompt_length: int, every: int | None = None) -> Iterator[tuple[int, int]]:
        """The spans a prefill feeds to bring it from what it holds to `prompt_length - 1` positions
        (the last token is the first round's), `PREFILL_STEP` at most, and ending at each multiple of
        `every` on the way (where a caller keeps the caches by block). With recurrent layers it also stops
        `RENDERED_AGAIN` before the prompt's end and keeps a checkpoint there once the caller has fed
        that span: a chat's next turn, which may render those tokens anew, is rewound to it."""
        start, end = self.length, prompt_length - 1
        at = resumes_at(prompt_length) if self.rewindable else None
        if at is not None and 0 < start >= at:  # already past it (a turn that continued): the nearest is here
            self.checkpoint()
        blocks = range((start // every + 1) * every, end, every) if every else ()
        cuts = sorted({*range(start, end, PREFILL_STEP), end, *blocks,
                       *([at] if at is not None and start < at <= end else [])})
        for low, high in zip(cuts, cuts[1:]):
            yield low, high
            if high == at:
                self.checkpoint()

    def checkpoint(self) -> None:
        """Each recurrent layer keeps the state it holds now, to be rewound to later."""
        for layer in self.recurrent:
            layer.checkpoint()

    def prefill_prompt(self, model: nn.Module, prompt: Sequence[int]) -> None:
        """Hold `prompt[:-1]`, fed from what it holds of it (its `chunks`), evaluated."""
        for low, high in self.chunks(len(prompt)):
            model(mx.array(prompt[low:high], dtype=mx.uint32)[None], cache=self)
            mx.eval([c.state for c in self])


def prefill(model: nn.Module, cache: Sequence[Any], tokens: Sequence[int]) -> None:
    """Run `tokens` through the model into `cache` (a `Stream`, or mlx-lm's own caches: a bench's
    baseline), in chunks, and evaluate."""
    for start in range(0, len(tokens), PREFILL_STEP):
        model(mx.array(tokens[start : start + PREFILL_STEP], dtype=mx.uint32)[None], cache=cache)
        mx.eval([c.state for c in cache])
