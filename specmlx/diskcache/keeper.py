"""What ties engines to the prompt cache on disk: a later request restores what an earlier one kept.

After each answer, `keep` copies the blocks of an engine's caches that the disk lacks (on the MLX
thread: a memory copy, no forward) and hands them to a writer thread, so the answer never waits for
the disk and a kept prefix is there within seconds of it: a killed process loses at most the turns
still queued. Before a request, `restore` reads the longest prefix of its prompt that its owner kept,
where that is more than the engine holds in memory.

Which blocks an answer keeps: every whole block of what the caches hold, and two partial ones: the
end of what they hold, and the prompt's end less the tokens a next turn may render anew
(`RENDERED_AGAIN`). A hybrid target's recurrent state is kept only where its caches hold one (the
end and the prompt's checkpoint), so its prefixes restore from those points.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Hashable, Mapping, Protocol, Sequence

import mlx.core as mx

from ..errors import SpecmlxError
from ..paths import CACHE_DIR_ENV, disk_cache_dir
from ..recurrent import RENDERED_AGAIN, is_recurrent
from .blocks import BLOCK, Block, chain
from .fingerprint import Fingerprint, fingerprint
from .store import DiskCache

log = logging.getLogger("specmlx.diskcache")

# A prompt holding fewer tokens past what memory holds is prefilled: reading a file costs more.
MIN_GAIN = 16
# A Mac's disk holds far more than its memory: about ten agent sessions' prefixes of a 14B target.
DEFAULT_GB = 20.0


class Restorable(Protocol):
    """What `Keeper` reads and writes of an engine (`specmlx.engine.Engine`)."""

    context: list[int]
    cache: list
    on_prefilled: Callable | None

    def cache_length(self) -> int: ...
    def reusable(self, prompt: Sequence[int]) -> int: ...
    def capture(self, start: int, end: int) -> dict[str, mx.array]: ...
    def restore(self, tokens: Sequence[int], blocks: Sequence[Mapping[str, mx.array]]) -> int: ...


@dataclass(frozen=True)
class Write:
    owner: str
    block: Block
    arrays: dict[str, mx.array]


def owner_key(owner: Hashable) -> str:
    """The owner's name on disk (an API key's digest: `serve.routes`), "" for a server without keys."""
    return "" if owner is None else str(owner)


class Keeper:
    """`store`'s entries for the weights `fp` names, written by a thread of its own."""

    def __init__(self, store: DiskCache, fp: Fingerprint) -> None:
        self.store, self.fp = store, fp
        self._queue: queue.Queue[Write | None] = queue.Queue()
        self._queued: set[tuple[str, str]] = set()  # (owner, hash) queued and not yet written
        self._writer = threading.Thread(target=self._write_all, name="disk-cache-writer", daemon=True)
        self._writer.start()

    def restore(self, engine: Restorable, owner: Hashable, prompt: Sequence[int]) -> int:
        """Bring `engine` to hold the longest prefix of `prompt` its owner kept, where that is at least
        `MIN_GAIN` tokens more than it holds; how many more it holds (0: none came from disk)."""
        held = engine.reusable(prompt)
        entries = self.store.longest(owner_key(owner), self.fp, prompt[: len(prompt) - 1])
        if not entries or entries[-1].end < held + MIN_GAIN:
            return 0
        blocks = self.store.load(owner_key(owner), self.fp, entries)
        if not blocks:
            return 0
        return max(0, engine.restore(prompt, blocks) - held)

    def keep(self, engine: Restorable, owner: Hashable, asked: int) -> None:
        """Queue the blocks of what `engine` holds that the disk lacks; `asked`: its last prompt's length."""
        held = engine.cache_length()
        tokens = engine.context[:held]
        key = owner_key(owner)
        ends = sorted({held, asked - min(RENDERED_AGAIN, asked // 2)} & set(range(1, held + 1)))
        blocks = {b.hash: b for end in ends for b in chain(tokens[:end])}  # by hash: both ends' chains share whole blocks
        for block in blocks.values():
            self._put(key, engine, block)

    def _put(self, key: str, engine: Restorable, block: Block) -> None:
        """Queue `block` of what `engine` holds, unless the disk has it or it is queued already."""
        kept = self.store.index.get(key, self.fp.model, block.hash)
        if (key, block.hash) in self._queued or (kept is not None and kept.fingerprint == self.fp.digest):
            return  # (one of other weights is written anew, in its place)
        self._queued.add((key, block.hash))
        self._queue.put(Write(key, block, engine.capture(block.start, block.end)))

    def watch(self, engine: Restorable, owner: Hashable) -> None:
        """Have a hybrid target's prefills, for `owner`, keep each block as they complete it
        (`keep_prefilled`). A transformer's blocks wait for `keep`, after the answer: its KV rows
        stay, and by then its drafter's own caches (which a prefill fills after the target's) are there."""
        hybrid = any(is_recurrent(layer) for layer in engine.cache)
        engine.on_prefilled = partial(self.keep_prefilled, owner) if hybrid else None

    def keep_prefilled(self, owner: Hashable, engine: Restorable, prompt: Sequence[int], held: int) -> None:
        """Queue the block a prefill just completed (`Engine.on_prefilled`), if `held` ends one, while the
        recurrent layers hold their state there."""
        if held % BLOCK == 0 and held > 0:
            self._put(owner_key(owner), engine, chain(prompt[:held])[-1])

    def flush(self) -> None:
        """Wait until every queued block is written (a test; shutdown)."""
        self._queue.join()

    def close(self) -> None:
        """Write what is queued, then stop the writer and close the index."""
        self._queue.put(None)
        self._writer.join()
        self.store.close()

    def _write_all(self) -> None:
        while (write := self._queue.get()) is not None:
            try:
                self.store.put(write.owner, self.fp, write.block, write.arrays)
            except Exception as err:  # noqa: BLE001 - a full disk loses this block, never an answer
                log.warning("disk cache: a block at positions %d..%d was not written: %s",
                            write.block.start, write.block.end - 1, str(err).splitlines()[0] if str(err) else err)
            finally:
                self._queued.discard((write.owner, write.block.hash))
                self._queue.task_done()
        self._queue.task_done()



def open_keeper(target: Path, cap_bytes: int) -> Keeper:
    """The prompt cache on disk (`paths.disk_cache_dir`) for the weights in `target`, or one line why not."""
    root = disk_cache_dir()
    try:
        store = DiskCache(root, cap_bytes)
    except (OSError, sqlite3.Error) as err:
        raise SpecmlxError(f"the prompt cache on disk cannot be opened in {root} ({err}); "
                           f"set ${CACHE_DIR_ENV} to another folder, or turn it off") from None
    return Keeper(store, fingerprint(target))
