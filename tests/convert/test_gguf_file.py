"""Opening GGUF files: every broken file is one clear SpecmlxError, never a numpy traceback."""

import pytest

from specmlx.convert.gguf_file import open_gguf
from specmlx.errors import SpecmlxError


def test_opens_tiny_file(tiny_gguf):
    gf = open_gguf(tiny_gguf("qwen2"))
    assert gf.arch == "qwen2"
    assert gf.get(".block_count") == 2
    assert gf.get("tokenizer.ggml.model") == "gpt2"
    assert gf.get_array("tokenizer.ggml.tokens")[:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert "token_embd.weight" in gf.tensor_names()


def test_missing_file(tmp_path):
    with pytest.raises(SpecmlxError, match="no such file"):
        open_gguf(tmp_path / "absent.gguf")


@pytest.mark.parametrize("keep", [0.05, 0.3, 0.6, 0.95, 0.999])
def test_truncated_file(tiny_gguf, tmp_path, keep):
    data = tiny_gguf("qwen2").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(SpecmlxError, match="truncated"):
        open_gguf(cut)


def test_truncated_to_magic_only(tmp_path):
    path = tmp_path / "magic.gguf"
    path.write_bytes(b"GGUF")
    with pytest.raises(SpecmlxError, match="truncated or corrupt"):
        open_gguf(path)


def test_bad_magic(tiny_gguf, tmp_path):
    data = bytearray(tiny_gguf("qwen2").read_bytes())
    data[:4] = b"GGML"
    path = tmp_path / "bad.gguf"
    path.write_bytes(bytes(data))
    with pytest.raises(SpecmlxError, match="not a GGUF file"):
        open_gguf(path)


def test_corrupt_header_counts(tiny_gguf, tmp_path):
    data = bytearray(tiny_gguf("qwen2").read_bytes())
    data[8:16] = (10**9).to_bytes(8, "little")  # tensor count far beyond the file
    path = tmp_path / "corrupt.gguf"
    path.write_bytes(bytes(data))
    with pytest.raises(SpecmlxError, match="truncated or corrupt"):
        open_gguf(path)
