"""What an image costs before its first token: `python -m specmlx.bench.vision`.

An image is read on the host (decoded, resized to the processor's grid, cut into patches:
`VisionTower.read`), then encoded by the tower on the device once (`VisionTower.features`; the last
few images' rows are kept, so an agent's screenshot sent again costs nothing there), and its rows are
prefilled with the prompt. Timed here at a real tower's shape, random float32 weights, for the sizes a
chat and an agent send (a photo, a laptop's screenshot, an external display's):
- `--family qwen3.5` (the default): transformers' `Qwen3_5VisionConfig` (27 blocks of width 1152, 16
  heads, MLP 4304, patches of 16, 2 × 2 merged), projecting to Qwen3.5-4B's width (2560);
- `--family gemma4`: Gemma 4 E2B's tower (16 blocks of width 768, 12 heads, MLP 3072, clipped linears,
  patches of 16 pooled 3 × 3), projecting to E2B's width (1536); its processor resizes every image to
  at most 280 rows, so its cost hardly depends on the image's size.
Its rows' prefill through the target is the prompt's, as the text's: `specmlx bench` measures that.
Each size encoded once untimed, then repeated: medians printed.
"""

from __future__ import annotations

import argparse
import io
import statistics
from time import perf_counter

import mlx.core as mx
from mlx.utils import tree_flatten
import numpy as np

from ..blas import describe, ensure_fast_blas
from ..vision.gemma import Encoder, GemmaTower
from ..vision.qwen import QwenTower
from ..vision.tower import Picture, VisionTower

TOWER = {"model_type": "qwen3_5", "depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16,
         "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "in_channels": 3,
         "num_position_embeddings": 2304, "out_hidden_size": 2560, "deepstack_visual_indexes": []}
# Qwen3.5's processor bounds: at most 16,384 patches of 16 (its `longest_edge` in pixels)
PROCESSOR = {"patch_size": 16, "temporal_patch_size": 2, "merge_size": 2, "min_pixels": 65536, "max_pixels": 16777216}
# Gemma 4 E2B's tower and processor (mlx-vlm's `gemma4` defaults, which are E2B's), into E2B's width
GEMMA_TOWER = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 16, "num_attention_heads": 12,
               "num_key_value_heads": 12, "head_dim": 64, "patch_size": 16, "pooling_kernel_size": 3,
               "position_embedding_size": 10240, "default_output_length": 280, "use_clipped_linears": True}
GEMMA_WIDTH = 1536
GEMMA_PROCESSOR = {"patch_size": 16, "max_soft_tokens": 280, "pooling_kernel_size": 3}
SIZES = ((640, 480, "a photo"), (1280, 800, "a laptop's screenshot"), (1920, 1080, "an external display's"))


def tower(family: str = "qwen3.5") -> VisionTower:
    """A random tower of the real shape, and the processor."""
    if family == "gemma4":
        return gemma_tower()
    from mlx_vlm.models.qwen3_5.config import VisionConfig
    from mlx_vlm.models.qwen3_5.vision import VisionModel
    from mlx_vlm.models.qwen3_vl.processing_qwen3_vl import Qwen3VLImageProcessor

    mx.random.seed(0)
    model = VisionModel(VisionConfig.from_dict(TOWER))
    mx.eval(model.parameters())
    return QwenTower(model, Qwen3VLImageProcessor(**PROCESSOR), {"image_token_id": 0, "vision_config": TOWER})


def gemma_tower() -> GemmaTower:
    from mlx_vlm.models.gemma4.processing_gemma4 import Gemma4ImageProcessor

    mx.random.seed(0)
    config = {"vision_config": GEMMA_TOWER, "text_config": {"hidden_size": GEMMA_WIDTH}, "image_token_id": 0,
              "boi_token_id": 1, "eoi_token_id": 2}
    model = Encoder(config)
    mx.eval(model.parameters())
    return GemmaTower(model, Gemma4ImageProcessor(**GEMMA_PROCESSOR), config)


def screenshot(width: int, height: int) -> bytes:
    """A PNG of blocks of colour and noise, as a screen has."""
    from PIL import Image

    rng = np.random.default_rng(width)
    pixels = np.repeat(np.repeat(rng.integers(0, 256, (height // 16, width // 16, 3), dtype=np.uint8), 16, 0), 16, 1)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def timed(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = perf_counter()
        run()
        times.append(perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specmlx.bench.vision", description=__doc__.splitlines()[0])
    parser.add_argument("--family", choices=("qwen3.5", "gemma4"), default="qwen3.5",
                        help="whose tower: Qwen3.5's (and 3.6's), or Gemma 4 E2B's")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", type=int, default=len(SIZES),
                        help=f"how many of the sizes, smallest first (of {len(SIZES)}; the largest takes minutes here)")
    args = parser.parse_args(argv)
    eyes = tower(args.family)
    weights = sum(v.nbytes for _, v in tree_flatten(eyes.model.parameters()))
    blocks, wide = ((GEMMA_TOWER["num_hidden_layers"], GEMMA_TOWER["hidden_size"]) if args.family == "gemma4"
                    else (TOWER["depth"], TOWER["hidden_size"]))
    print(f"tower ({args.family}): {blocks} blocks of {wide}, {weights / 1e9:.2f} GB in float32 "
          f"({mx.default_device()}, {describe()}), median of {args.repeats}")
    print(f"{'image':>10} {'what':<24} {'patches':>8} {'rows':>6} {'read ms':>8} {'tower s':>8} {'ms/row':>7}")
    for width, height, what in SIZES[:args.sizes]:
        data = screenshot(width, height)
        picture: Picture = eyes.read(data)
        read_ms = 1000 * timed(lambda: eyes.read(data), args.repeats)

        eyes.encode(picture)  # once untimed: MLX's first call of a shape pays for its setup
        tower_s = timed(lambda: eyes.encode(picture), args.repeats)
        patches = picture.grid[0] * picture.grid[1] * picture.grid[2]
        print(f"{width}x{height:<5} {what:<24} {patches:>8} {picture.rows:>6} {read_ms:>8.1f} {tower_s:>8.3g} "
              f"{1000 * tower_s / picture.rows:>7.3g}", flush=True)
    return 0


if __name__ == "__main__":
    ensure_fast_blas()  # Linux CPU: the tower is matrix products; re-executes with OpenBLAS once
    raise SystemExit(main())
