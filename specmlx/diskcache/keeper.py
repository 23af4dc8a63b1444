"""What ties engines to the prompt cache on disk: a later request restores what an earlier one kept.

After each answer, `keep` copies the blocks of an engine's caches that the disk lacks (on the MLX
thread: a memory copy, no forward) and hands them to a writer thread, so the answer never waits for
the disk and a kept prefix is there within seconds of it: a killed process loses at most the turns
still queued. Before a request, `restore` reads the longest prefix of its prompt that its owner kept,
where that is more than the engine holds in memory.

Which blocks an answer keeps: every whole block of what the caches hold, and two partial ones: the
end of what they hold, and the prompt's end less the tokens a next turn may render anew
(`RENDERED_AGAIN`). A request that says how much of its prompt a later one may share (`shareable`: an
autocomplete's text before the cursor) keeps the whole blocks within that alone: a keystroke changes
every block after the cursor, and keeping them wrote 130 MB a completion that no request read.
A hybrid target's recurrent state is kept only where its caches hold one (the end and the prompt's
checkpoint), so its prefixes restore from those points.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Hashable, Sequence

import mlx.core as mx

from ..errors import SpecmlxError
from ..paths import CACHE_DIR_ENV, disk_cache_dir
from ..caches.recurrent import RENDERED_AGAIN, is_recurrent
from .blocks import BLOCK, Block, chain
from .fingerprint import Fingerprint, fingerprint
from .index import Entry
from ..caches.snapshot import keepable
from .store import DiskCache, first_line

if TYPE_CHECKING:  # the engine imports this package's snapshots
    from ..engine import Engine

log = logging.getLogger("specmlx.diskcache")

# A prompt holding fewer tokens past what memory holds is prefilled: reading a file costs more.
MIN_GAIN = 16
# A Mac's disk holds far more than its memory: about ten agent sessions' prefixes of a 14B target.
DEFAULT_GB = 20.0
MAX_PENDING = 1 << 30  # bytes of blocks copied and waiting for the writer before a keep waits for it


@dataclass(frozen=True)
class Write:
    owner: str
    block: Block
    arrays: dict[str, mx.array]


def owner_key(owner: Hashable) -> str:
    """The owner's name on disk: an API key's digest (`serve.routes`), "" for a server without keys."""
    return "" if owner is None else str(owner)


class Keeper:
    """`store`'s entries for the weights `fp` names, written by a thread of its own.

    Nothing here fails a request: a block that cannot be read, kept or written is a line in the log,
    and the prompt is prefilled as without the disk."""

    def __init__(self, store: DiskCache, fp: Fingerprint) -> None:
        self.store, self.fp = store, fp
        self._queue: queue.Queue[Write | None] = queue.Queue()
        self._queued: set[tuple[str, str]] = set()  # (owner, hash) queued and not yet written
        self._pending = 0  # bytes captured and not yet written
        self._writer = threading.Thread(target=self._write_all, name="disk-cache-writer", daemon=True)
        self._writer.start()

    def restore(self, engine: Engine, owner: Hashable, prompt: Sequence[int], shareable: int | None = None) -> int:
        """Before `owner`'s request: bring `engine` to hold the longest prefix of `prompt` its owner kept,
        where that is at least `MIN_GAIN` tokens more than it holds, and have its prefills keep their
        blocks for `owner` (`watch`; within `shareable` tokens, if given); how many more it holds (0: none
        came from disk)."""
        self.watch(engine, owner, shareable)
        if not keepable(engine.cache):
            return 0
        held = engine.reusable(prompt)
        try:
            entries = self.store.longest(owner_key(owner), self.fp, prompt[: len(prompt) - 1])
            if not entries or entries[-1].end < held + MIN_GAIN:
                return 0
            blocks = self.store.load(owner_key(owner), self.fp, entries)
            return max(0, engine.restore(prompt, blocks) - held) if blocks else 0
        except Exception as err:  # noqa: BLE001 - what the caches held may be gone: they hold nothing
            log.warning("disk cache: a kept prefix could not be restored, so it is prefilled: %s", first_line(err))
            engine.forget(0)
            return 0

    def keep(self, engine: Engine, owner: Hashable, asked: int, shareable: int | None = None) -> None:
        """Queue the blocks of what `engine` holds that the disk lacks, and mark those it has as used
        now (a conversation served from memory keeps its blocks from eviction); `asked`: its last
        prompt's length; `shareable`: of it, what a later request may share, if not all (whole blocks only)."""
        if not keepable(engine.cache):
            return
        tokens = engine.context[: engine.cache_length()]
        at = asked - min(RENDERED_AGAIN, asked // 2)
        ends = sorted({len(tokens), *([at] if 0 < at < len(tokens) else [])})
        if shareable is not None:
            whole = min(shareable, len(tokens)) // BLOCK * BLOCK
            ends = [whole] if whole else []
        blocks = {b.hash: b for end in ends for b in chain(tokens[:end])}  # by hash: both ends' chains share whole blocks
        try:
            kept = [entry for block in blocks.values() if (entry := self._put(owner_key(owner), engine, block))]
            self.store.touch(kept)
        except Exception as err:  # noqa: BLE001 - the answer was sent: this turn is not kept
            log.warning("disk cache: a turn was not kept: %s", first_line(err))

    def watch(self, engine: Engine, owner: Hashable, shareable: int | None = None) -> None:
        """Have a hybrid target's prefills, for `owner`, keep each block as they complete it, within
        `shareable` tokens if given (`keep_prefilled`). A transformer's blocks wait for `keep`, after the
        answer: its KV rows stay, and by then its drafter's own caches (which a prefill fills after the
        target's) are there."""
        hybrid = keepable(engine.cache) and any(is_recurrent(layer) for layer in engine.cache)
        engine.on_prefilled = partial(self.keep_prefilled, owner, shareable=shareable) if hybrid else None

    def keep_prefilled(self, owner: Hashable, engine: Engine, prompt: Sequence[int], held: int,
                       shareable: int | None = None) -> None:
        """Queue the block a prefill just completed (`Engine.on_prefilled`), if `held` ends one (within
        `shareable`, if given), while the recurrent layers hold their state there."""
        if held % BLOCK == 0 and 0 < held <= (held if shareable is None else shareable):
            try:
                self._put(owner_key(owner), engine, chain(prompt[:held])[-1])
            except Exception as err:  # noqa: BLE001 - the prefill goes on
                log.warning("disk cache: a block was not kept: %s", first_line(err))

    def _put(self, key: str, engine: Engine, block: Block) -> Entry | None:
        """Queue `block` of what `engine` holds, unless it is queued already or on disk (its entry, then)."""
        kept = self.store.index.get(key, self.fp.model, block.hash)
        if kept is not None and kept.fingerprint == self.fp.digest:
            return kept  # (one of other weights is written anew, in its place)
        if (key, block.hash) in self._queued:
            return None
        if self._pending > MAX_PENDING:  # copies wait in memory for the disk: at most this many
            self._queue.join()
        arrays = engine.capture(block.start, block.end)
        self._queued.add((key, block.hash))
        self._pending += sum(a.nbytes for a in arrays.values())
        self._queue.put(Write(key, block, arrays))
        return None

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
                            write.block.start, write.block.end - 1, first_line(err))
            finally:
                self._queued.discard((write.owner, write.block.hash))
                self._pending -= sum(a.nbytes for a in write.arrays.values())
                self._queue.task_done()
        self._queue.task_done()


def open_store(cap_bytes: int) -> DiskCache:
    """The prompt cache on disk (`paths.disk_cache_dir`), or one line why it cannot be opened."""
    root = disk_cache_dir()
    try:
        return DiskCache(root, cap_bytes)
    except (OSError, sqlite3.Error) as err:
        raise SpecmlxError(f"the prompt cache on disk cannot be opened in {root} ({first_line(err)}); "
                           f"set ${CACHE_DIR_ENV} to another folder, or turn it off with --no-disk-cache") from None


def open_keeper(target: Path, cap_bytes: int) -> Keeper:
    """`open_store`'s store, for the weights in `target`."""
    return Keeper(open_store(cap_bytes), fingerprint(target))
