"""Open a GGUF file and read its metadata, turning every way a file can be bad into one message.

The `gguf` reader reports a truncated file as a numpy reshape error and a corrupt header as
a dtype error; callers here only ever see `SpecmlxError` with the path and what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from specmlx.errors import SpecmlxError, first_line

GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class GGUFFile:
    """An opened GGUF: its path, the `gguf` reader and the architecture it states."""

    path: Path
    reader: gguf.GGUFReader
    arch: str

    def get(self, key: str, default: Any = None) -> Any:
        """A scalar or string value; `{arch}.` is prefixed to keys starting with a dot."""
        field = self.reader.get_field(f"{self.arch}{key}" if key.startswith(".") else key)
        if field is None or not field.types:
            return default
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            raise SpecmlxError(f"{self.path.name}: metadata {key!r} is an array, expected a value")
        return field.contents()

    def require(self, key: str) -> Any:
        """Like `get`, but a missing key is an error naming it."""
        value = self.get(key)
        if value is None:
            full = f"{self.arch}{key}" if key.startswith(".") else key
            raise SpecmlxError(f"{self.path.name}: GGUF metadata lacks {full!r}")
        return value

    def get_array(self, key: str) -> list | None:
        """An array value as a Python list (strings decoded as UTF-8), or None if absent."""
        field = self.reader.get_field(key)
        if field is None:
            return None
        if field.types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8", errors="replace") for i in field.data]
        # Numeric arrays: one numpy part per element; concatenating is far faster than contents().
        return np.concatenate([field.parts[i] for i in field.data]).tolist() if field.data else []

    def tensor_names(self) -> set[str]:
        return {t.name for t in self.reader.tensors}


def open_gguf(path: Path) -> GGUFFile:
    """Open `path` as GGUF, checking magic, header and that every tensor's data is in the file."""
    path = Path(path)
    if not path.is_file():
        raise SpecmlxError(f"no such file: {path}")
    with path.open("rb") as fh:
        magic = fh.read(4)
    if magic != GGUF_MAGIC:
        raise SpecmlxError(f"{path.name}: not a GGUF file (magic {magic!r}, expected {GGUF_MAGIC!r})")
    try:
        reader = gguf.GGUFReader(path)
    except Exception as exc:  # the reader has no error type of its own
        raise SpecmlxError(
            f"{path.name}: truncated or corrupt GGUF ({type(exc).__name__}: {first_line(exc)[:160]})"
        ) from exc
    _check_complete(path, reader)
    arch = reader.get_field("general.architecture")
    if arch is None:
        raise SpecmlxError(f"{path.name}: GGUF metadata lacks 'general.architecture'")
    return GGUFFile(path=path, reader=reader, arch=arch.contents())


def _check_complete(path: Path, reader: gguf.GGUFReader) -> None:
    # A file cut exactly between tensors can still parse; its last tensor then ends past EOF.
    size = path.stat().st_size
    end = max((t.data_offset + t.n_bytes for t in reader.tensors), default=0)
    if end > size:
        raise SpecmlxError(f"{path.name}: truncated GGUF ({size:,} bytes, tensors need {end:,})")
