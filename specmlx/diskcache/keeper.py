"""The prompt cache on disk for one set of weights: a later request restores what an earlier one kept.

After each answer, `keep` copies the blocks of a stream's caches that the disk lacks (through the
`capture` it is handed, on the MLX thread: a memory copy, no forward) and hands them to a writer
thread, so the answer never waits for the disk and a kept prefix is there within seconds of it: a
killed process loses at most the turns still queued. Before a request, `found` reads the longest prefix
of its prompt that its owner kept, where that is more than is held in memory. This package knows
nothing of the engine: what stands above both (`specmlx/keeping.py`) hands the keeper what the engine
captured and the engine what the keeper found.

Which blocks an answer keeps: every whole block of what the caches hold, and two partial ones: the
end of what they hold, and the prompt's end less the tokens a next turn may render anew
(`caches.resumes_at`). A request that says how much of its prompt a later one may share (`shareable`: an
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
from pathlib import Path
from typing import Callable, Hashable, Sequence

import mlx.core as mx

from ..errors import SpecmlxError
from ..paths import CACHE_DIR_ENV, disk_cache_dir
from ..caches.kinds import Arrays, KVBits
from ..caches.stream import resumes_at
from .blocks import BLOCK, Block, chain
from .fingerprint import Fingerprint, fingerprint
from .index import Entry
from .store import DiskCache, first_line

log = logging.getLogger("specmlx.diskcache")

# A prompt holding fewer tokens past what memory holds is prefilled: reading a file costs more.
MIN_GAIN = 16
# A Mac's disk holds far more than its memory: about ten agent sessions' prefixes of a 14B target.
DEFAULT_GB = 20.0
MAX_PENDING = 1 << 30  # bytes of blocks copied and waiting for the writer before a keep waits for it

Capture = Callable[[int, int], Arrays]  # a stream's positions start..end-1 as named arrays (`caches.snapshot`)


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

    def found(self, owner: Hashable, prompt: Sequence[int], held: int) -> list[Arrays]:
        """The blocks of the longest prefix of `prompt` that `owner` kept, where that is at least `MIN_GAIN`
        tokens more than the `held` ones memory holds; none otherwise, or where they cannot be read (a
        line in the log)."""
        try:
            entries = self.store.longest(owner_key(owner), self.fp, prompt[: len(prompt) - 1])
            if not entries or entries[-1].end < held + MIN_GAIN:
                return []
            return self.store.load(owner_key(owner), self.fp, entries)
        except Exception as err:  # noqa: BLE001 - the prompt is prefilled as without the disk
            log.warning("disk cache: a kept prefix could not be read, so it is prefilled: %s", first_line(err))
            return []

    def keep(self, owner: Hashable, tokens: Sequence[int], capture: Capture, asked: int,
             shareable: int | None = None) -> None:
        """Queue the blocks of `tokens` (what a stream's caches hold, read by `capture`) that the disk
        lacks, and mark those it has as used now (a conversation served from memory keeps its blocks from
        eviction); `asked`: its last prompt's length; `shareable`: of it, what a later request may share,
        if not all (whole blocks only)."""
        at = resumes_at(asked)
        ends = sorted({len(tokens), *([at] if 0 < at < len(tokens) else [])})
        if shareable is not None:
            whole = min(shareable, len(tokens)) // BLOCK * BLOCK
            ends = [whole] if whole else []
        blocks = {b.hash: b for end in ends for b in chain(tokens[:end])}  # by hash: both ends' chains share whole blocks
        try:
            kept = [entry for block in blocks.values() if (entry := self._put(owner_key(owner), capture, block))]
            self.store.touch(kept)
        except Exception as err:  # noqa: BLE001 - the answer was sent: this turn is not kept
            log.warning("disk cache: a turn was not kept: %s", first_line(err))

    def keep_prefilled(self, owner: Hashable, capture: Capture, prompt: Sequence[int], held: int,
                       shareable: int | None = None) -> None:
        """Queue the block a prefill just completed, if `held` ends one (within `shareable`, if given),
        while a hybrid's recurrent layers hold their state there: a transformer's blocks wait for `keep`,
        after the answer (its KV rows stay, and by then its drafter's own caches are there)."""
        if held % BLOCK == 0 and 0 < held <= (held if shareable is None else shareable):
            try:
                self._put(owner_key(owner), capture, chain(prompt[:held])[-1])
            except Exception as err:  # noqa: BLE001 - the prefill goes on
                log.warning("disk cache: a block was not kept: %s", first_line(err))

    def _put(self, key: str, capture: Capture, block: Block) -> Entry | None:
        """Queue `block` of what `capture` reads, unless it is queued already or on disk (its entry, then)."""
        kept = self.store.index.get(key, self.fp.model, block.hash)
        if kept is not None and kept.fingerprint == self.fp.digest:
            return kept  # (one of other weights is written anew, in its place)
        if (key, block.hash) in self._queued:
            return None
        if self._pending > MAX_PENDING:  # copies wait in memory for the disk: at most this many
            self._queue.join()
        arrays = capture(block.start, block.end)
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


def open_keeper(target: Path, cap_bytes: int, kv: KVBits | None = None) -> Keeper:
    """`open_store`'s store, for the weights in `target` (its keys and values quantized as `kv` says:
    `fingerprint`)."""
    return Keeper(open_store(cap_bytes), fingerprint(target, kv=kv))
