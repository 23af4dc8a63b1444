"""SHA-256 checks: given, or known for the project's checkpoints."""

import hashlib

import pytest

from specmlx.convert import checksum, convert
from specmlx.convert.checksum import KnownFile, known_file, sha256_file, verify_file
from specmlx.errors import SpecmlxError


def test_sha256_file(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 10_000_000)
    assert sha256_file(path, progress=False) == hashlib.sha256(b"x" * 10_000_000).hexdigest()


def test_verify_given(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"abc")
    good = hashlib.sha256(b"abc").hexdigest()
    assert verify_file(path, good.upper(), progress=False) == good
    with pytest.raises(SpecmlxError, match="does not match the given --sha256"):
        verify_file(path, "0" * 64, progress=False)
    with pytest.raises(SpecmlxError, match="not a sha256"):
        verify_file(path, "abc", progress=False)


def test_unknown_file_without_checksum_is_not_checked(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"abc")
    assert verify_file(path, None, progress=False) is None


def test_known_checkpoint_by_size_and_by_name(tmp_path, monkeypatch):
    path = tmp_path / "renamed.gguf"
    path.write_bytes(b"abcd")
    fake = KnownFile("fake model", ("fake.gguf",), 4, "0" * 64)
    monkeypatch.setattr(checksum, "KNOWN_FILES", (fake,))
    assert known_file(path) == fake
    with pytest.raises(SpecmlxError, match="does not match the checksum of fake model"):
        verify_file(path, None, progress=False)
    short = tmp_path / "fake.gguf"
    short.write_bytes(b"ab")
    with pytest.raises(SpecmlxError, match="2 bytes, but fake model has 4 .truncated"):
        verify_file(short, None, progress=False)


def test_known_table_matches_models_md():
    assert {k.sha256 for k in checksum.KNOWN_FILES} == {
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    }


def test_conversion_checks_sha256_first(tiny_gguf, tmp_path):
    path = tiny_gguf("qwen2")
    with pytest.raises(SpecmlxError, match="sha256 .* does not match"):
        convert(path, tmp_path / "out", sha256="f" * 64, progress=False)
    assert not (tmp_path / "out").exists()
    good = hashlib.sha256(path.read_bytes()).hexdigest()
    assert (convert(path, tmp_path / "out", sha256=good, progress=False) / "config.json").exists()
