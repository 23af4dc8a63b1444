"""A Gemma 4 assistant checkpoint (local HF directory) -> an MLX drafter directory.

mlx-lm does not know `gemma4_assistant`, so this writes the directory itself:
config.json (the source's, with the new dtype) and one model.safetensors in
`dtype`, with `token_ordering` kept as int32 ids. Nothing is quantized: the
centroid scores and the 4-layer trunk are small, and the ordering must stay
exact. The weights are loaded into the model first, so a checkpoint that does
not fit its config fails before anything is written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
from tqdm import tqdm

from specmlx.convert.atomic import check_destination, staged_path
from specmlx.convert.options import DTYPES, retyped
from specmlx.models.gemma4_assistant import ORDERING, load_gemma4_assistant, read_config
from specmlx.errors import SpecmlxError

# Files copied as they are (the assistant shares its target's tokenizer; keeping
# them lets tools that expect one find it).
EXTRAS = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
          "generation_config.json", "chat_template.jinja")


def convert_gemma4_assistant(
    source: str | Path, out: str | Path, dtype: str = "float32", force: bool = False, progress: bool = True
) -> Path:
    """Write the assistant at `source` to `out` in `dtype`; returns `out`.

    `out` appears only when complete; an existing `out` is replaced only with `force`.
    """
    source, out = Path(source).expanduser(), Path(out)
    if dtype not in DTYPES:
        raise SpecmlxError(f"unknown dtype {dtype!r} (choose from {', '.join(DTYPES)})")
    check_destination(out, force)
    if not source.is_dir():
        raise SpecmlxError(f"{source}: not a directory (expected a Gemma 4 assistant checkpoint)")
    raw = read_config(source)
    if raw.get("quantization") or raw.get("quantization_config"):
        raise SpecmlxError(f"{source}: already quantized; convert from the original checkpoint")
    model = load_gemma4_assistant(source)  # validates config and tensors
    weights = model.weights()
    cast = getattr(mx, dtype)
    tensors = {}
    for name, value in tqdm(sorted(weights.items()), desc=f"convert {source.name}", unit="tensor",
                            disable=not progress):
        tensors[name] = value.astype(mx.int32 if name == ORDERING else cast)
    mx.eval(tensors)
    config = retyped(raw, dtype)
    with staged_path(out, force) as work:
        work.mkdir()
        mx.save_safetensors(str(work / "model.safetensors"), tensors, metadata={"format": "mlx"})
        (work / "config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        for extra in EXTRAS:
            if (source / extra).is_file():
                shutil.copyfile(source / extra, work / extra)
    return out
