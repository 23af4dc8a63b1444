"""The prompt cache on disk: named MLX arrays per block of a conversation, found by owner, model
and chain hash (`blocks.py`), in a folder only this user can read.

Safe by construction:
- files 0600 in a 0700 folder; an entry is read only for the owner (an API key's id) that wrote it;
- each entry's arrays are one safetensors file, written under a temporary name, flushed, then renamed,
  and only then indexed: a crash leaves a stray file (swept at the next start), never half an entry;
- an entry of another version of the model's weights (its fingerprint), or whose file is missing,
  truncated, unreadable, damaged in place (its checksum) or not the one indexed, is skipped with one
  line in the log and removed;
- a write that fails (a full disk) loses that write only: what is kept is still read, and the log
  says so once, until a write succeeds again;
- the total is capped: least recently used entries go first.
No pickle: safetensors holds arrays and string metadata only.

The store knows nothing of caches: it keeps `dict[str, mx.array]`; `snapshot.py` makes them.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Mapping, Sequence

import mlx.core as mx

from .blocks import BLOCK, ROOT, Block, block_hash
from .fingerprint import Fingerprint
from .index import Entry, Index

log = logging.getLogger("specmlx.diskcache")

SUFFIX = ".safetensors"
INDEX_FILES = ("index.sqlite", "index.sqlite-wal", "index.sqlite-shm")  # SQLite's database, log and shared memory
TEMPORARY = "tmp-"  # a file being written; one older than STALE_S was left by a crash
STALE_S = 600  # long enough that another process's write in progress is never swept
OURS = re.compile(rf"({TEMPORARY}[0-9a-f]{{32}}|[0-9a-f]{{64}}){re.escape(SUFFIX)}")  # what `put` names files


class DiskCache:
    """Blocks' arrays on disk under `root`, at most `cap_bytes` in all."""

    def __init__(self, root: Path, cap_bytes: int) -> None:
        self.root = Path(root)
        self.cap_bytes = cap_bytes
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)  # mkdir's mode is cut by the umask, and an old folder keeps its own
        self.index = _index(self.root / INDEX_FILES[0])
        for name in INDEX_FILES:
            if (self.root / name).exists():
                os.chmod(self.root / name, 0o600)
        self._clock = self.index.latest()
        self._failing = False  # the last write was refused: said once (`_refused`)
        self.sweep()

    def put(self, owner: str, fp: Fingerprint, block: Block, arrays: Mapping[str, mx.array]) -> Entry | None:
        """Keep `arrays` as `owner`'s `block`, for the model `fp` names; then evict down to the cap.
        None where the disk refused the write (`_refused`)."""
        try:
            entry = self._write(owner, fp, block, arrays)
        except (OSError, sqlite3.Error) as err:
            self._refused("writing a block", err)
            return None
        self._failing = False
        self.evict()
        return entry

    def _write(self, owner: str, fp: Fingerprint, block: Block, arrays: Mapping[str, mx.array]) -> Entry:
        name = hashlib.sha256("\0".join((owner, fp.model, block.hash)).encode()).hexdigest() + SUFFIX
        metadata = {"owner": owner, "model": fp.model, "hash": block.hash, "fingerprint": fp.digest}
        temporary = self.root / f"{TEMPORARY}{uuid.uuid4().hex}{SUFFIX}"
        try:
            # Made 0600 before a byte is written: a crash mid-write leaves nothing another user may read.
            # Through a Python file: a full disk is then an OSError; MLX's own writer says RuntimeError.
            with open(temporary, "xb", opener=lambda path, flags: os.open(path, flags, 0o600)) as file:
                mx.save_safetensors(file, dict(arrays), metadata=metadata)
            _flush(temporary)
            digest = checksum(temporary)
            os.replace(temporary, self.root / name)
        except BaseException:  # a full disk, an interrupt: nothing of this write stays
            temporary.unlink(missing_ok=True)
            raise
        entry = Entry(owner, fp.model, block.hash, block.parent, block.start, len(block.tokens),
                      (self.root / name).stat().st_size, self._tick(), fp.digest, name, digest)
        self.index.put(entry)
        return entry

    def longest(self, owner: str, fp: Fingerprint, tokens: Sequence[int], size: int = BLOCK) -> list[Entry]:
        """The entries, in order, that hold the longest prefix of `tokens` kept for `owner`: whole
        blocks by their hashes, then the longest partial block that continues them. Index only: a
        file may still fail to `load`."""
        found: list[Entry] = []
        parent, start = ROOT, 0
        while start < len(tokens):
            entry = self.index.get(owner, fp.model, block_hash(parent, tokens[start : start + size]))
            if entry is None or entry.length < size:  # a partial block: among the children below
                break
            found.append(entry)
            parent, start = entry.hash, entry.end
        for child in self.index.children(owner, fp.model, parent):
            if child.end <= len(tokens) and child.hash == block_hash(parent, tokens[start : child.end]):
                found.append(child)
                break
        return found

    def load(self, owner: str, fp: Fingerprint, entries: Sequence[Entry]) -> list[dict[str, mx.array]]:
        """Each entry's arrays, in order, up to the first that cannot be used (skipped and removed).
        The entries after it are checked too, and those damaged removed: the prefill from there keeps
        anew only the blocks the index lacks, so a damaged one left indexed would wait for the next restore."""
        loaded: list[dict[str, mx.array]] = []
        for entry in entries:
            arrays = self._read(owner, fp, entry)
            if arrays is None:
                break
            loaded.append(arrays)
        for entry in entries[len(loaded) + 1 :]:
            self._check(entry)
        self.touch(entries[: len(loaded)])
        return loaded

    def _read(self, owner: str, fp: Fingerprint, entry: Entry) -> dict[str, mx.array] | None:
        if entry.owner != owner or entry.model != fp.model:
            raise ValueError("an entry is read only for the owner and model it was written for")
        if entry.fingerprint != fp.digest:
            return self._drop(entry, "written for another version of the model's weights or of specmlx")
        path = self._check(entry)
        if path is None:
            return None
        try:
            arrays, metadata = mx.load(str(path), return_metadata=True)
            mx.eval(list(arrays.values()))
        except (RuntimeError, ValueError, OSError) as err:
            return self._drop(entry, f"its file cannot be read ({str(err).splitlines()[0]})")
        if metadata != {"owner": owner, "model": fp.model, "hash": entry.hash, "fingerprint": fp.digest}:
            return self._drop(entry, "its file is not the one indexed")
        return arrays

    def _check(self, entry: Entry) -> Path | None:
        """`entry`'s file, if it holds the bytes written (its size, its checksum); else None, dropped."""
        path = self.root / entry.file
        if not path.is_file() or path.stat().st_size != entry.nbytes:
            return self._drop(entry, "its file is missing or not of the size written")
        if not entry.checksum:
            return self._drop(entry, "kept before blocks carried a checksum")
        try:
            if checksum(path) != entry.checksum:
                return self._drop(entry, "its bytes are not those written (damaged in place)")
        except OSError as err:
            return self._drop(entry, f"its file cannot be read ({first_line(err)})")
        return path

    def _drop(self, entry: Entry, why: str) -> None:
        log.warning("disk cache: skipped and removed the block at positions %d..%d (%s): %s",
                    entry.start, entry.end - 1, entry.file, why)
        self.remove(entry)

    def remove(self, entry: Entry) -> None:
        """Forget `entry` and delete its file; where the index cannot be written (a full disk), the file
        stays and its row is dropped at a later read."""
        try:
            self.index.remove(entry)
        except sqlite3.Error as err:
            self._refused("removing a block", err)
            return
        (self.root / entry.file).unlink(missing_ok=True)

    def _refused(self, what: str, err: BaseException) -> None:
        """A write the disk refused (a full disk, a read-only folder): one line until a write succeeds,
        not one a block. Restores go on: a read needs no write."""
        if not self._failing:
            log.warning("disk cache: %s failed (%s): kept blocks are still read, new ones are not kept "
                        "(said once until a write succeeds)", what, first_line(err))
        self._failing = True

    def evict(self) -> None:
        """Remove least recently used entries until the total fits the cap: the entries' files and
        the index's own (its database and write-ahead log)."""
        files = (self.root / name for name in INDEX_FILES)
        total = self.index.total_bytes() + sum(path.stat().st_size for path in files if path.exists())
        for entry in self.index.oldest():
            if total <= self.cap_bytes:
                return
            self.remove(entry)
            total -= entry.nbytes

    def sweep(self) -> None:
        """Remove what a crash left: a temporary file, or a renamed one never indexed (both stale).
        Only names this store writes: the folder may hold a user's own files ($SPECMLX_CACHE_DIR)."""
        indexed = self.index.files()
        stale = time.time() - STALE_S
        for path in self.root.glob(f"*{SUFFIX}"):
            ours = OURS.fullmatch(path.name) is not None
            if ours and path.name not in indexed and path.stat().st_mtime < stale:
                path.unlink(missing_ok=True)

    def touch(self, entries: Sequence[Entry]) -> None:
        """Mark `entries` used now: least recently used entries go first. A disk that refuses it loses
        the order, not the entries."""
        if entries:
            try:
                self.index.touch(list(entries), self._tick())
            except sqlite3.Error as err:
                self._refused("marking blocks used", err)

    def total_bytes(self) -> int:
        return self.index.total_bytes()

    def close(self) -> None:
        self.index.close()

    def _tick(self) -> int:
        """A use's time for eviction's order: nanoseconds, strictly increasing within this process."""
        self._clock = max(time.time_ns(), self._clock + 1)
        return self._clock


def checksum(path: Path) -> str:
    """SHA-256 of the file's bytes, read in chunks: the CPU's SHA instructions (x86's SHA-NI, Apple
    Silicon's) make it the fastest of hashlib's here, twice blake2b's speed (docs/serving.md has the figures)."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def first_line(err: BaseException) -> str:
    """An error's first line, for the log."""
    return (str(err).splitlines() or [type(err).__name__])[0]


def _flush(path: Path) -> None:
    """Make the file's bytes durable before its rename makes it an entry (a crashed machine)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _index(path: Path) -> Index:
    """The index at `path`; a damaged one is set aside with a line in the log and started anew (its
    entries' files, then unindexed, are swept). Any other error is raised: a full disk (no room for
    SQLite's shared memory) says nothing of the index, and setting it aside would lose every block."""
    try:
        return Index(path)
    except sqlite3.DatabaseError as err:
        if err.sqlite_errorcode & 0xFF not in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
            raise
        aside = path.with_name(f"{path.name}.damaged-{int(time.time())}")
        log.warning("disk cache: the index %s cannot be read (%s): moved to %s, starting anew", path, err, aside.name)
        path.replace(aside)
        for name in (f"{path.name}-wal", f"{path.name}-shm"):
            (path.parent / name).unlink(missing_ok=True)
        return Index(path)
