"""A checkpoint's vision tower, kept through a conversion mlx-lm does without it.

mlx-lm converts the text model and drops the tower (Qwen3.5's `model.visual.*`, Gemma 4's
`model.vision_tower.*` and `model.embed_vision.*`) and may drop its `vision_config`. After it has written
the target, this module writes the tower beside it (`vision.safetensors`, mlx-vlm's names and layout, cast
to the target's float type but not quantized: it runs once an image, and mlx-vlm's own conversions keep it
wide), what `config.json` says of images back in it, and the image processor's settings, where `specmlx
serve` reads them (`vision.tower`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx

from specmlx.convert.options import OutputFormat
from specmlx.vision.checkpoint import family_of, has_vision
from specmlx.vision.tower import KEPT, PROCESSOR_FILES, vision_weights

# what a config says of images: the tower's settings and the tokens that place an image's rows
IMAGE_KEYS = ("vision_config", "image_token_id", "boi_token_id", "eoi_token_id")


def keep_vision(source: Path, work: Path, fmt: OutputFormat) -> int:
    """Write the source's vision tower and processor settings into `work`; how many tensors were written
    (0: the source has no tower read here)."""
    if not has_vision(source):
        return 0
    dtype = getattr(mx, fmt.dtype)
    weights = {k: v.astype(dtype) if mx.issubdtype(v.dtype, mx.floating) else v
               for k, v in vision_weights(source, family_of(source).weight_name).items()}
    mx.save_safetensors(str(work / KEPT), weights, metadata={"format": "mlx"})
    config = json.loads((work / "config.json").read_text())
    given = json.loads((source / "config.json").read_text())
    config.update({key: given[key] for key in IMAGE_KEYS if key in given})
    (work / "config.json").write_text(json.dumps(config, indent=4))
    for name in PROCESSOR_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, work / name)
    return len(weights)
