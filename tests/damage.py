"""A kept block's file damaged in place, at its size: what a bad sector or a sync tool does, and what
only a checksum of the bytes can tell (the file still reads as safetensors, its metadata intact)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Callable

HUGE = struct.pack("<f", 1e30) * 16  # 64 bytes of float32 1e30


def damage_in_place(path: Path, which: Callable[[str], bool] = lambda name: True) -> int:
    """Overwrite 64 bytes in the middle of each tensor `which` names (those of 64 bytes or more) with
    1e30s; the number of tensors damaged."""
    data = bytearray(path.read_bytes())
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    damaged = 0
    for name, info in header.items():
        if name == "__metadata__" or not which(name):
            continue
        start, end = (8 + size + offset for offset in info["data_offsets"])
        if end - start >= len(HUGE):
            middle = start + (end - start - len(HUGE)) // 2
            data[middle : middle + len(HUGE)] = HUGE
            damaged += 1
    path.write_bytes(bytes(data))
    return damaged
