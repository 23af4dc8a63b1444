"""Recording a recurrent layer's forward so that any prefix of it can be replayed from its mark.

A recurrent mixer (mlx-lm's Gated DeltaNet, Mamba-2) is the module its decoder layer hands the
layer's cache to. While a forward is recorded, each of the mixer's own sub-modules (projections,
short convolution, gated norm, output projection) keeps its output. A replay of the first n
positions calls the mixer again from the kept state, its sub-modules answering with their
recorded rows instead of computing: what runs again is the convolution window and the
recurrence, with no weight read. The sub-modules are position-wise or causal, so their first n
rows are what a forward of those n positions gives; the mixer's own code does the rest, so every
architecture keeps its own recurrence, gates and state layout. A batch's replay (`Recorded`) may
take some rows only, or every row under a mask of its own length (`batch_recurrent.py`).
"""

from __future__ import annotations

import inspect
import weakref
from contextlib import contextmanager
from typing import Any, Iterator

import mlx.core as mx
import mlx.nn as nn

from ..errors import SpecmlxError
from ..hidden import inner_model


def _submodules(module: nn.Module) -> list[str]:
    return [name for name, value in module.items() if isinstance(value, nn.Module)]


class _Keep:
    """A mixer's sub-module that keeps what it returns."""

    def __init__(self, module: nn.Module, kept: list[mx.array], width: int) -> None:
        self._module, self._kept, self._width = module, kept, width

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self._module(*args, **kwargs)
        if not isinstance(out, mx.array) or out.ndim < 2 or out.shape[1] != self._width:
            raise SpecmlxError(f"cannot replay {type(self._module).__name__}: its output is not one row a position")
        self._kept.append(out)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


class _Give:
    """A mixer's sub-module that answers, call by call, with the first positions it returned when recorded
    (of the batch rows `rows`, all without)."""

    def __init__(self, module: nn.Module, kept: list[mx.array], n: int, rows: mx.array | None = None) -> None:
        self._module, self._kept, self._n, self._rows, self._next = module, kept, n, rows, 0

    def __call__(self, *args: Any, **kwargs: Any) -> mx.array:
        out = self._kept[self._next]
        self._next += 1
        return out[:, : self._n] if self._rows is None else out[self._rows, : self._n]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


@contextmanager
def _swapped(module: nn.Module, proxies: dict[str, Any]) -> Iterator[None]:
    """`module`'s named sub-modules replaced by `proxies` for the block (a module is a dict of them)."""
    originals = {name: module[name] for name in proxies}
    try:
        for name, proxy in proxies.items():
            module[name] = proxy
        yield
    finally:
        for name, original in originals.items():
            module[name] = original


def _replay(mixer: nn.Module, kept: dict[str, list[mx.array]], args: tuple, kwargs: dict, n: int,
            rows: mx.array | None = None, mask: mx.array | None = None) -> None:
    """The mixer run again on its first `n` positions, into the cache it was handed (output unused).
    A batch's replay may take some `rows` only, or all under a `mask` of each row's positions
    (`batch.recurrent`): the mask goes where the forward's own mask went."""
    x = args[0][:, :n] if rows is None else args[0][rows, :n]
    if mask is not None:
        bound = inspect.signature(mixer).bind(x, *args[1:], **kwargs)
        if "mask" not in inspect.signature(mixer).parameters:  # else the rows would replay past their lengths
            raise SpecmlxError(f"cannot replay {type(mixer).__name__} row by row: it takes no `mask`")
        bound.arguments["mask"] = mask
        args, kwargs = bound.args, bound.kwargs
    else:
        args = (x, *args[1:])
    with _swapped(mixer, {name: _Give(mixer[name], kept[name], n, rows) for name in kept}):
        mixer(*args, **kwargs)


class Recorded:
    """One mixer's recorded forward: called with n, it replays the first n positions into its cache.

    The cache keeps this in its marks, so this keeps the cache only weakly: else a dropped engine's
    recurrent layers would wait for Python's cycle collector to free their states."""

    def __init__(self, mixer: nn.Module, kept: dict[str, list[mx.array]], args: tuple, kwargs: dict) -> None:
        cache = _cache_of(args, kwargs)
        self._cache = weakref.ref(cache)
        self.mixer, self._kept = mixer, kept
        self._args = tuple(_CACHE if a is cache else a for a in args)
        self._kwargs = {k: _CACHE if v is cache else v for k, v in kwargs.items()}

    @property
    def nbytes(self) -> int:
        """What the record holds: the mixer's input and its sub-modules' outputs."""
        return self._args[0].nbytes + sum(out.nbytes for outs in self._kept.values() for out in outs)

    def __call__(self, n: int, rows: mx.array | None = None, mask: mx.array | None = None) -> None:
        cache = self._cache()
        args = tuple(cache if a is _CACHE else a for a in self._args)
        kwargs = {k: cache if v is _CACHE else v for k, v in self._kwargs.items()}
        _replay(self.mixer, self._kept, args, kwargs, n, rows, mask)


_CACHE = object()  # where a recorded call's cache went among its arguments


def _record(mixer: nn.Module, cache: Any, args: tuple, kwargs: dict) -> Any:
    """The mixer's forward, leaving its cache the way to replay any prefix of it (`cache.pending`)."""
    if any(isinstance(a, mx.array) for a in (*args[1:], *kwargs.values())):
        raise SpecmlxError(f"cannot record {type(mixer).__name__} under a mask (a batch's padding)")
    kept: dict[str, list[mx.array]] = {name: [] for name in _submodules(mixer)}
    cache.pending = Recorded(mixer, kept, args, kwargs)
    try:
        with _swapped(mixer, {name: _Keep(mixer[name], kept[name], args[0].shape[1]) for name in kept}):
            out = mixer(*args, **kwargs)
    finally:
        left, cache.pending = cache.pending, None
    if left is not None:
        raise SpecmlxError(f"cannot rewind {type(mixer).__name__}: it does not advance its cache")
    return out


def _cache_of(args: tuple, kwargs: dict) -> Any:
    return next((a for a in (*args, *kwargs.values()) if hasattr(a, "pending")), None)


class _Mixer:
    """A decoder layer's sub-module: the one its layer hands the recurrent cache to is recorded."""

    def __init__(self, module: nn.Module, cache: Any, found: list[nn.Module]) -> None:
        self._module, self._cache, self._found = module, cache, found

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not args or _cache_of(args, kwargs) is not self._cache:
            return self._module(*args, **kwargs)
        self._found.append(self._module)
        return _record(self._module, self._cache, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


class _Layer:
    """A decoder layer that, when handed a recurrent cache, records its mixer's forward."""

    def __init__(self, layer: nn.Module) -> None:
        self._layer = layer

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        cache = _cache_of(args, kwargs)
        if cache is None:
            return self._layer(*args, **kwargs)
        before, found = cache.offset, []
        with _swapped(self._layer, {name: _Mixer(self._layer[name], cache, found)
                                    for name in _submodules(self._layer)}):
            out = self._layer(*args, **kwargs)
        if cache.offset != before and not found:
            raise SpecmlxError(f"cannot rewind the recurrent layer {type(self._layer).__name__}: "
                               "it hands its cache to none of its sub-modules")
        return out

    def __getattr__(self, name: str) -> Any:  # models read attributes off their layers (`is_linear`, `block_type`)
        return getattr(self._layer, name)


@contextmanager
def recording(model: nn.Module, cache: Any) -> Iterator[None]:
    """Forwards of `model` into `cache` (a stream's, `stream.Stream`, or a batch's, `batch.BatchCache`) in
    this block can be rewound to any of their positions (`recurrent.RecurrentCache`); nothing is wrapped
    for a cache without recurrent layers (which it knows since it was made: nothing is scanned here)."""
    if not cache.rewindable:
        yield
        return
    layers = inner_model(model).layers
    originals = list(layers)
    try:
        layers[:] = [_Layer(layer) for layer in originals]
        yield
    finally:
        layers[:] = originals
