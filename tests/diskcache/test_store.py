"""The store on disk: round trips, owners apart, damaged or foreign entries skipped and removed,
no half entry after a crash, least recently used evicted first, files only this user reads."""

from __future__ import annotations

import os
import resource
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time
from contextlib import contextmanager
from pathlib import Path

import mlx.core as mx
import pytest

from specmlx.diskcache.blocks import BLOCK, chain
from specmlx.diskcache.fingerprint import Fingerprint
from specmlx.diskcache.store import STALE_S, DiskCache

from ..damage import damage_in_place
from .conftest import FP

ROOT = Path(__file__).resolve().parents[2]
TOKENS = list(range(2 * BLOCK + 40))


def arrays_of(block) -> dict[str, mx.array]:
    """A block's stand-in arrays: its token ids, in two dtypes."""
    ids = mx.array(block.tokens, dtype=mx.int32)
    return {"ids": ids, "half": (ids.astype(mx.float32) / 7).astype(mx.bfloat16)}


def large(block) -> dict[str, mx.array]:
    """A block's stand-in arrays of a megabyte: the index's own files (tens of KB) count in the cap too."""
    return arrays_of(block) | {"pad": mx.zeros(1 << 18)}


def keep(store, tokens=TOKENS, owner="alice", fp=FP):
    return [store.put(owner, fp, block, arrays_of(block)) for block in chain(tokens)]


def test_a_kept_conversation_comes_back_whole_and_after_a_restart(store, tmp_path):
    keep(store)
    for cache in (store, DiskCache(tmp_path / "kept", cap_bytes=1 << 30)):  # a new process's store
        entries = cache.longest("alice", FP, TOKENS + [7, 7])  # a next turn: the partial block too
        assert [(e.start, e.end) for e in entries] == [(0, BLOCK), (BLOCK, 2 * BLOCK), (2 * BLOCK, len(TOKENS))]
        loaded = cache.load("alice", FP, entries)
        for block, arrays in zip(chain(TOKENS), loaded, strict=True):
            want = arrays_of(block)
            assert arrays.keys() == want.keys()
            assert all(arrays[k].dtype == want[k].dtype and mx.array_equal(arrays[k], want[k]) for k in want)


@pytest.mark.parametrize("prompt, found", [
    (TOKENS[:300] + [1] * 300, [BLOCK]),  # branches inside the second block
    (TOKENS[: 2 * BLOCK + 39], [BLOCK, 2 * BLOCK]),  # ends inside the partial block
    (TOKENS[:100], []),
    ([5] + TOKENS, []),
])
def test_a_prompt_finds_the_blocks_it_shares(store, prompt, found):
    keep(store)
    assert [e.end for e in store.longest("alice", FP, prompt)] == found


def test_an_entry_is_read_only_for_the_owner_that_wrote_it(store):
    entries = keep(store)
    assert store.longest("bob", FP, TOKENS) == []
    with pytest.raises(ValueError):
        store.load("bob", FP, entries)
    assert not any("alice" in p.name for p in store.root.iterdir())  # names say nothing of the owner
    assert len(store.load("alice", FP, store.longest("alice", FP, TOKENS))) == 3


def test_an_entry_of_other_weights_is_skipped_with_a_line_and_removed(store, log_lines):
    entries = keep(store)
    newer = Fingerprint(FP.model, "digest-2")
    assert store.load("alice", newer, store.longest("alice", newer, TOKENS)) == []
    assert len(log_lines) == 1 and "another version" in log_lines[0]
    assert not (store.root / entries[0].file).exists()
    assert [e.end for e in store.longest("alice", FP, TOKENS)] == []  # its first block is gone


def test_an_entry_of_another_model_is_never_found_and_stays(store, log_lines):
    keep(store)
    assert store.longest("alice", Fingerprint("models/other", FP.digest), TOKENS) == []
    assert len(store.longest("alice", FP, TOKENS)) == 3 and log_lines == []


@pytest.mark.parametrize("damage", ["truncate", "delete", "swap"])
def test_a_damaged_file_is_skipped_with_a_line_and_removed(store, log_lines, damage):
    entries = keep(store)
    path = store.root / entries[1].file
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:-9])
    elif damage == "delete":
        path.unlink()
    else:  # another entry's file of the same size under this one's name
        other = keep(store, [t + 1 for t in TOKENS])[1]
        path.write_bytes((store.root / other.file).read_bytes())
    loaded = store.load("alice", FP, store.longest("alice", FP, TOKENS))
    assert len(loaded) == 1  # the blocks before it, none after it
    assert len(log_lines) == 1 and "skipped" in log_lines[0]
    assert not path.exists()
    assert [e.end for e in store.longest("alice", FP, TOKENS)] == [BLOCK]


def test_a_truncated_file_of_the_indexed_size_is_skipped_too(store, log_lines):
    """A file cut and padded back to its size: the size check passes, the load does not."""
    entry = keep(store)[0]
    path = store.root / entry.file
    data = path.read_bytes()
    path.write_bytes(data[:100] + b"\0" * (len(data) - 100))
    assert store.load("alice", FP, [entry]) == []
    assert len(log_lines) == 1 and not path.exists()


def test_a_block_damaged_in_place_is_skipped_and_so_are_damaged_ones_after_it(store, log_lines):
    """Its size and metadata are those written and it loads: only its checksum tells. The blocks
    after it are checked in the same restore, so the prefill from there keeps the damaged ones anew."""
    entries = keep(store)
    for entry in entries[1:]:
        assert damage_in_place(store.root / entry.file) == 2
    assert mx.load(str(store.root / entries[1].file))  # it still reads as safetensors
    loaded = store.load("alice", FP, store.longest("alice", FP, TOKENS))
    assert len(loaded) == 1 and all(mx.array_equal(loaded[0][k], arrays_of(chain(TOKENS)[0])[k]) for k in loaded[0])
    assert len(log_lines) == 2 and all("damaged in place" in line for line in log_lines)
    assert [e.end for e in store.longest("alice", FP, TOKENS)] == [BLOCK]
    assert {p.name for p in store.root.glob("*.safetensors")} == {entries[0].file}


def test_an_index_of_before_checksums_opens_and_its_blocks_are_kept_anew(tmp_path, log_lines):
    """An index without the checksum column (specmlx before it): it opens; its rows cannot be checked,
    so each is skipped and removed at its first use, and the next answer keeps the block anew."""
    root = tmp_path / "kept"
    keep(DiskCache(root, cap_bytes=1 << 30))
    db = sqlite3.connect(root / "index.sqlite")
    db.execute("ALTER TABLE entries DROP COLUMN checksum")
    db.commit()
    db.close()
    store = DiskCache(root, cap_bytes=1 << 30)
    assert store.load("alice", FP, store.longest("alice", FP, TOKENS)) == []
    assert "before blocks carried a checksum" in log_lines[0]
    keep(store)
    assert len(store.load("alice", FP, store.longest("alice", FP, TOKENS))) == 3


def test_a_full_disk_costs_writes_not_restores_and_says_so_once(store, log_lines, monkeypatch):
    """The index refuses every write (SQLite's "database or disk is full"), the files too: what was
    kept is still restored, and sixty refused writes are one line, until a write succeeds again."""
    entries = keep(store)
    full = sqlite3.OperationalError("database or disk is full")
    for name in ("put", "touch", "remove"):
        monkeypatch.setattr(store.index, name, lambda *a, **k: (_ for _ in ()).throw(full))
    monkeypatch.setattr("specmlx.diskcache.store._flush", lambda path: (_ for _ in ()).throw(OSError(28, "No space left")))
    for _ in range(20):
        assert len(store.load("alice", FP, store.longest("alice", FP, TOKENS))) == 3
        assert keep(store, [t + 1 for t in TOKENS]) == [None] * 3
    assert len(log_lines) == 1 and "said once" in log_lines[0]
    monkeypatch.undo()
    assert keep(store, [t + 2 for t in TOKENS])[0] is not None  # the disk has room again
    monkeypatch.setattr("specmlx.diskcache.store._flush", lambda path: (_ for _ in ()).throw(OSError(28, "No space left")))
    keep(store, [t + 3 for t in TOKENS])
    assert len(log_lines) == 2 and entries


@contextmanager
def refused_past(nbytes: int):
    """The kernel refuses this process's writes past `nbytes` into a file (RLIMIT_FSIZE: EFBIG, Python
    ignores SIGXFSZ), as a full disk refuses them part-way: unprivileged, and through MLX's own writer."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def test_a_disk_that_refuses_a_blocks_bytes_part_way_loses_the_write_only(store, log_lines):
    """A block of a megabyte refused after 256 KB, by the kernel and not a stand-in: the write is lost
    (no entry, no temporary file), what was kept is still restored, and twenty refused writes are one line."""
    keep(store)
    with refused_past(256 << 10):
        for i in range(1, 8):
            blocks = chain([t + i for t in TOKENS])
            assert [store.put("alice", FP, block, large(block)) for block in blocks] == [None] * len(blocks)
            assert len(store.load("alice", FP, store.longest("alice", FP, TOKENS))) == 3
    assert len(log_lines) == 1 and "said once" in log_lines[0]
    assert len(list(store.root.glob("*.safetensors"))) == 3
    block = chain([t + 1 for t in TOKENS])[0]
    assert store.put("alice", FP, block, large(block)) is not None  # the disk has room again


CRASH = textwrap.dedent("""
    import os, sys
    import mlx.core as mx
    from specmlx.diskcache import store as module
    from specmlx.diskcache.blocks import chain
    from specmlx.diskcache.fingerprint import Fingerprint
    cache = module.DiskCache(sys.argv[1], cap_bytes=1 << 30)
    fp, moment, tokens = Fingerprint("models/tiny", "digest-1"), sys.argv[2], [int(t) for t in sys.argv[3:]]
    cache.put("alice", fp, chain([1, 2, 3, 4])[0], {"x": mx.ones(4)})
    if moment == "before-rename":
        module.os.replace = lambda *a: os._exit(9)
    else:
        cache.index.put = lambda *a: os._exit(9)
    cache.put("alice", fp, chain(tokens)[0], {"x": mx.zeros(len(tokens))})
""")


def crash(root: Path, moment: str, tokens: list[int]) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", CRASH, str(root), moment, *map(str, tokens)], env=env, timeout=120)
    assert done.returncode == 9


def x_of(store: DiskCache, tokens: list[int]) -> list[list[float]]:
    return [a["x"].tolist() for a in store.load("alice", FP, store.longest("alice", FP, tokens))]


@pytest.mark.parametrize("moment", ["before-rename", "before-index"])
def test_a_process_killed_writing_a_new_entry_leaves_none(tmp_path, moment):
    """What was half done is never an entry, and is swept at a start once stale."""
    root = tmp_path / "kept"
    crash(root, moment, [1, 2, 3])
    store = DiskCache(root, cap_bytes=1 << 30)
    assert store.longest("alice", FP, [1, 2, 3]) == [] and x_of(store, [1, 2, 3, 4]) == [[1.0] * 4]
    stray = sorted(set(root.glob("*.safetensors")) - {root / e.file for e in store.longest("alice", FP, [1, 2, 3, 4])})
    assert len(stray) == 1  # the temporary file, or the renamed one never indexed
    assert DiskCache(root, cap_bytes=1 << 30) and stray[0].exists()  # young: another process may be writing it
    os.utime(stray[0], (time.time() - STALE_S - 1,) * 2)
    DiskCache(root, cap_bytes=1 << 30)
    assert not stray[0].exists()


@pytest.mark.parametrize("moment, found", [("before-rename", [[1.0] * 4]), ("before-index", [])])
def test_a_process_killed_rewriting_an_entry_leaves_one_whole_version(tmp_path, moment, found):
    """The entry's file is replaced whole or not at all: the old arrays, or none where the new file
    (same block, same weights) was renamed in but its row not written (its checksum is the old
    file's), never a mix; before the rename nothing of the new write is visible."""
    root = tmp_path / "kept"
    crash(root, moment, [1, 2, 3, 4])
    assert x_of(DiskCache(root, cap_bytes=1 << 30), [1, 2, 3, 4]) == found


def test_a_write_that_fails_leaves_nothing(store, monkeypatch):
    """A full disk (here: the flush fails): no file and no entry stay."""
    monkeypatch.setattr("specmlx.diskcache.store._flush", lambda path: (_ for _ in ()).throw(OSError("disk full")))
    assert keep(store) == [None] * len(chain(TOKENS))
    assert list(store.root.glob("*.safetensors")) == [] and store.total_bytes() == 0


def test_the_cap_evicts_the_least_recently_used_first(tmp_path):
    blocks = chain(TOKENS)
    size = DiskCache(tmp_path / "probe", 1 << 30).put("a", FP, blocks[0], large(blocks[0])).nbytes
    store = DiskCache(tmp_path / "kept", cap_bytes=2 * size + size // 2)  # two full blocks fit, not three
    first, second = (store.put(owner, FP, blocks[0], large(blocks[0])) for owner in ("a", "b"))
    store.load("a", FP, [first])  # used again: now the newest
    store.put("c", FP, blocks[0], large(blocks[0]))
    assert [bool(store.longest(owner, FP, TOKENS)) for owner in "abc"] == [True, False, True]
    assert not (store.root / second.file).exists()
    assert store.total_bytes() <= store.cap_bytes


def test_files_are_the_users_alone(tmp_path):
    root = tmp_path / "kept"
    root.mkdir(mode=0o755)
    old = os.umask(0)  # the loosest umask: the store must not rely on it
    try:
        root.chmod(0o777)
        store = DiskCache(root, cap_bytes=1 << 30)
        keep(store)
    finally:
        os.umask(old)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    files = list(root.iterdir())
    assert any(p.suffix == ".safetensors" for p in files) and any(p.name == "index.sqlite" for p in files)
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in files} == {p.name: "0o600" for p in files}


def test_the_sweep_removes_only_files_the_store_names(tmp_path):
    """$SPECMLX_CACHE_DIR may name a folder holding a user's own files: a stale one is never swept."""
    root = tmp_path / "kept"
    DiskCache(root, cap_bytes=1 << 30).close()
    mine = root / "model.safetensors"
    ours = [root / f"tmp-{'a' * 32}.safetensors", root / f"{'b' * 64}.safetensors"]
    for path in (mine, *ours):
        path.write_bytes(b"x")
        os.utime(path, (time.time() - STALE_S - 1,) * 2)
    DiskCache(root, cap_bytes=1 << 30).close()
    assert mine.exists() and not any(path.exists() for path in ours)


def test_a_damaged_index_is_set_aside_with_a_line_and_the_store_starts_anew(tmp_path, log_lines):
    root = tmp_path / "kept"
    store = DiskCache(root, cap_bytes=1 << 30)
    keep(store)
    store.close()
    (root / "index.sqlite").write_bytes(b"not a database" * 100)
    again = DiskCache(root, cap_bytes=1 << 30)
    assert again.longest("alice", FP, TOKENS) == [] and keep(again)  # usable again
    assert any("cannot be read" in line and "starting anew" in line for line in log_lines)
    assert len(list(root.glob("index.sqlite.damaged-*"))) == 1


def test_a_restart_on_a_full_disk_is_an_error_and_never_sets_the_index_aside(tmp_path, log_lines):
    """Opening the index needs room for SQLite's shared memory (32 KB), which a full disk refuses
    (SQLITE_IOERR_SHMSIZE): the index is sound, so it is neither set aside nor its blocks swept, and
    it opens whole once there is room."""
    root = tmp_path / "kept"
    store = DiskCache(root, cap_bytes=1 << 30)
    keep(store)
    store.close()
    with refused_past(1024), pytest.raises(sqlite3.OperationalError):
        DiskCache(root, cap_bytes=1 << 30)
    assert log_lines == [] and not list(root.glob("index.sqlite.damaged-*"))
    again = DiskCache(root, cap_bytes=1 << 30)
    assert len(again.load("alice", FP, again.longest("alice", FP, TOKENS))) == 3

def test_the_index_and_its_write_ahead_log_count_in_the_cap(tmp_path):
    """Two blocks' files fit the cap to the byte; with the index's own files they do not."""
    blocks = chain(TOKENS)
    size = DiskCache(tmp_path / "probe", 1 << 30).put("a", FP, blocks[0], large(blocks[0])).nbytes
    store = DiskCache(tmp_path / "kept", cap_bytes=2 * size + 1)
    for owner in ("a", "b"):
        store.put(owner, FP, blocks[0], large(blocks[0]))
    assert [bool(store.longest(owner, FP, TOKENS)) for owner in "ab"] == [False, True]
    assert (store.root / "index.sqlite-wal").stat().st_size > 0


def test_touched_entries_are_evicted_last(tmp_path):
    """A conversation served from memory keeps its blocks on disk: `touch` marks them used."""
    blocks = chain(TOKENS)
    size = DiskCache(tmp_path / "probe", 1 << 30).put("a", FP, blocks[0], large(blocks[0])).nbytes
    store = DiskCache(tmp_path / "kept", cap_bytes=2 * size + size // 2)
    first, _ = (store.put(owner, FP, blocks[0], large(blocks[0])) for owner in ("a", "b"))
    store.touch([first])
    store.put("c", FP, blocks[0], large(blocks[0]))
    assert [bool(store.longest(owner, FP, TOKENS)) for owner in "abc"] == [True, False, True]
