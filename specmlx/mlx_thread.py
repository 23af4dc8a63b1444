"""One long-lived thread for all MLX work: loading, prefill, decoding.

Why not run MLX directly in Textual's thread workers: those come from a pool,
so two workers may run on two different threads, and since MLX 0.31.2 each
thread has its own default stream; an array made lazily on one thread cannot
be evaluated on another ("There is no Stream(cpu, 0) in current thread", on
the CPU backend as on Metal). Workers stay `@work(thread=True)` and hand their
MLX calls to this thread, which also serialises them: one engine, one caller
at a time.
"""

from __future__ import annotations

import threading
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")
_DONE = object()


class MLXThread:
    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specmlx-mlx")
        self._ident: int | None = None
        self._closed = False
        # A safety net for owners that never call close(): the hook the standard
        # library's own executors use, run before non-daemon threads are joined.
        # It holds a weak reference, so it keeps nothing (models) alive by itself.
        register = getattr(threading, "_register_atexit", None)
        if register is not None:
            ref = weakref.ref(self)
            register(lambda: (lambda thread: thread and thread.close())(ref()))

    def call(self, fn: Callable[..., T], *args, **kwargs) -> T:
        """Run `fn` on the MLX thread and wait for it; its exception is re-raised here."""
        if threading.get_ident() == self._ident:
            return fn(*args, **kwargs)
        return self.submit(fn, *args, **kwargs).result()

    def submit(self, fn: Callable[..., T], *args, **kwargs) -> "Future[T]":
        """Queue `fn` for the MLX thread without waiting: calls run one at a time, in order."""
        return self._executor.submit(self._run, fn, *args, **kwargs)

    def iterate(self, iterator: Iterator[T]) -> Iterator[T]:
        """Step `iterator` on the MLX thread, handing each item to the caller's thread."""
        try:
            while True:
                item = self.call(next, iterator, _DONE)
                if item is _DONE:
                    return
                yield item
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:  # a generator's cleanup is MLX work too
                self.call(close)

    def close(self) -> None:
        """Finish queued work, release this thread's MLX streams, end the thread.

        Without the release, the process can abort at exit ("terminate called
        without an active exception") once this thread has run a generation.
        """
        if self._closed:
            return
        self._closed = True
        if self._ident is not None:
            self._executor.submit(_release_streams).result()
        self._executor.shutdown(wait=True)

    def _run(self, fn: Callable[..., T], *args, **kwargs) -> T:
        self._ident = threading.get_ident()
        return fn(*args, **kwargs)


def _release_streams() -> None:
    import mlx.core as mx

    mx.synchronize()
    mx.clear_streams()


@contextmanager
def closed_on_error(mlx: MLXThread) -> Iterator[MLXThread]:
    """`mlx`, closed if the block raises: an owner that fails before it hands the thread on
    (a server that fails to start) would otherwise leave its streams, and abort at exit."""
    try:
        yield mlx
    except BaseException:
        mlx.close()
        raise
