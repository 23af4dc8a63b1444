"""The disk cache's index: one SQLite table of entries, in write-ahead-log mode, so a reader in
another process (the app beside the server) never waits on a writer and a crash loses no row
that was committed.

An entry is one block of one owner's conversation, for one model: the chain hash of the tokens up
to its end (`blocks.py`) and its parent's, where it starts and how many positions it holds, its
file's name and size, its fingerprint, and when it was last used (for least-recently-used eviction).
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import Iterator

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    owner TEXT NOT NULL, model TEXT NOT NULL, hash TEXT NOT NULL, parent TEXT NOT NULL,
    start INTEGER NOT NULL, length INTEGER NOT NULL, nbytes INTEGER NOT NULL, last_used INTEGER NOT NULL,
    fingerprint TEXT NOT NULL, file TEXT NOT NULL UNIQUE, checksum TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (owner, model, hash));
CREATE INDEX IF NOT EXISTS children ON entries (owner, model, parent);
CREATE INDEX IF NOT EXISTS age ON entries (last_used);
"""


@dataclass(frozen=True)
class Entry:
    """One block's row: `hash` names the prefix up to `start + length` (see `blocks.Block`)."""

    owner: str
    model: str
    hash: str
    parent: str
    start: int
    length: int
    nbytes: int
    last_used: int
    fingerprint: str
    file: str
    checksum: str = ""  # SHA-256 of the file's bytes; "" in an index of before checksums: never read

    @property
    def end(self) -> int:
        return self.start + self.length


WAL_LIMIT = 4 << 20  # bytes of write-ahead log kept between checkpoints
COLUMNS = ", ".join(f.name for f in fields(Entry))
SLOTS = ", ".join("?" for _ in fields(Entry))


class Index:
    """The entries table; every method is one short transaction, safe from any thread."""

    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        # Autocommit: each statement commits at once, so a killed process leaves whole rows only.
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        # The log is cut back to this after each checkpoint, not left at its largest: it counts in the cap.
        self._db.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT}")
        self._db.executescript(SCHEMA)
        if "checksum" not in {row[1] for row in self._db.execute("PRAGMA table_info(entries)")}:
            # An index of before checksums: its rows read "" and are skipped and removed on first use.
            self._db.execute("ALTER TABLE entries ADD COLUMN checksum TEXT NOT NULL DEFAULT ''")

    def _rows(self, sql: str, *args) -> list[Entry]:
        with self._lock:
            return [Entry(*row) for row in self._db.execute(f"SELECT {COLUMNS} FROM entries {sql}", args)]

    def get(self, owner: str, model: str, hash: str) -> Entry | None:
        rows = self._rows("WHERE owner = ? AND model = ? AND hash = ?", owner, model, hash)
        return rows[0] if rows else None

    def children(self, owner: str, model: str, parent: str) -> list[Entry]:
        """The entries that continue the prefix `parent` names, longest first."""
        return self._rows("WHERE owner = ? AND model = ? AND parent = ? ORDER BY length DESC", owner, model, parent)

    def put(self, entry: Entry) -> None:
        """Add `entry`, or replace the row of the same owner, model and hash."""
        with self._lock:
            self._db.execute(f"INSERT OR REPLACE INTO entries ({COLUMNS}) VALUES ({SLOTS})", astuple(entry))

    def touch(self, entries: list[Entry], now: int) -> None:
        with self._lock:
            self._db.executemany("UPDATE entries SET last_used = ? WHERE file = ?", [(now, e.file) for e in entries])

    def remove(self, entry: Entry) -> None:
        with self._lock:
            self._db.execute("DELETE FROM entries WHERE file = ?", (entry.file,))

    def total_bytes(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COALESCE(SUM(nbytes), 0) FROM entries").fetchone()[0]

    def latest(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COALESCE(MAX(last_used), 0) FROM entries").fetchone()[0]

    def oldest(self) -> Iterator[Entry]:
        """Least recently used first; of blocks used together, the deepest (a chain's end) first."""
        yield from self._rows("ORDER BY last_used ASC, start DESC")

    def files(self) -> set[str]:
        with self._lock:
            return {row[0] for row in self._db.execute("SELECT file FROM entries")}

    def close(self) -> None:
        with self._lock:
            self._db.close()
