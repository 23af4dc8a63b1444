"""A prompt's tokens as a hash chain of blocks, as vLLM's and SGLang's prefix caches key them.

A block is at most `BLOCK` positions; its hash covers its parent's hash and its own token ids, so
one hash names the whole prefix up to the block's end. Two prompts share a block only where they
share every token before and in it. A kept conversation's last, partial block is keyed the same
way, by its exact tokens: a longer prompt finds it among its parent's children (`DiskCache.longest`).

Pure Python: no MLX, no files.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Sequence

BLOCK = 256
ROOT = ""  # the parent of a chain's first block


@dataclass(frozen=True)
class Block:
    """Positions `start`..`end - 1` of a prompt; `hash` names the prefix up to `end`."""

    start: int
    tokens: tuple[int, ...]
    hash: str
    parent: str

    @property
    def end(self) -> int:
        return self.start + len(self.tokens)


def block_hash(parent: str, tokens: Sequence[int]) -> str:
    """The chain's hash of a block of `tokens` after the prefix `parent` names (hex SHA-256)."""
    digest = hashlib.sha256(parent.encode("ascii"))
    # The count first: a block's bytes are never another block's (ids are fixed-width anyway).
    digest.update(struct.pack(f"<I{len(tokens)}I", len(tokens), *tokens))
    return digest.hexdigest()


def chain(tokens: Sequence[int], size: int = BLOCK) -> tuple[Block, ...]:
    """`tokens` cut into blocks of `size`, the last one partial if they do not fill it."""
    blocks: list[Block] = []
    parent = ROOT
    for start in range(0, len(tokens), size):
        part = tuple(int(t) for t in tokens[start : start + size])
        blocks.append(Block(start, part, block_hash(parent, part), parent))
        parent = blocks[-1].hash
    return tuple(blocks)
