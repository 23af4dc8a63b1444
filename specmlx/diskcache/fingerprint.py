"""Which weights a cache entry was computed with: an entry of another model, or of another version
of the same model's weights, must never be restored.

Cheap by design: the config's bytes and the weights files' names, sizes and modification times
(never their contents, which may be tens of gigabytes), and specmlx's version. A rewrite that keeps
a file's size and time would go unseen; any download or conversion changes the time.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from .. import __version__
from ..caches.kinds import KVBits

# What decides the numbers a cache holds: the weights, and how token ids were cut (the tokenizer).
WEIGHTS = ("*.safetensors", "*.safetensors.index.json", "*.gguf", "tokenizer.json", "tokenizer_config.json")


@dataclass(frozen=True)
class Fingerprint:
    """`model`: which model (its resolved folder); `digest`: which version of it, with this specmlx."""

    model: str
    digest: str


def fingerprint(model_dir: Path, *drafters: Path, kv: KVBits | None = None) -> Fingerprint:
    """The fingerprint of a target's folder, and of its drafters' where their caches are kept too; `kv`:
    its keys and values kept quantized (`--kv-bits`), so that blocks of one setting are another version
    to the others', written anew in their place."""
    digest = hashlib.sha256(__version__.encode() + (b"" if kv is None else kv.label.encode()))
    for folder in (model_dir, *drafters):
        digest.update(json.dumps(_describe(Path(folder)), sort_keys=True).encode())
    return Fingerprint(str(Path(model_dir).resolve()), digest.hexdigest())


def _describe(folder: Path) -> dict:
    config = folder / "config.json"
    files = sorted({p for pattern in WEIGHTS for p in folder.glob(pattern)})
    stats = [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    return {"config": hashlib.sha256(config.read_bytes()).hexdigest() if config.is_file() else None,
            "files": stats}
