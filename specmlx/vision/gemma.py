"""Gemma 4's tower: mlx-vlm's Gemma 4 vision encoder, its projection into the text model's width
(`embed_vision`) and its image processor. An image is resized to at most `max_soft_tokens` rows of
3 x 3 pooled patches; the prompt frames them with the image's begin and end tokens. Positions are the
tokens' indices (one-dimensional RoPE), so the text engine's rotation serves an image prompt as it is.

Two things differ from text, both as mlx-vlm's `Gemma4.get_input_embeddings` does them:
- the text model scales its input embeddings by the square root of its width, which mlx-vlm applies
  to the text's rows alone: an image's rows are handed to mlx-lm's text model divided by it;
- the per-layer inputs (E2B's and E4B's) read the token id at each position, and read 0 at an
  image's rows (`stand_in`).

The larger checkpoints' images attend both ways within an image (`use_bidirectional_attention:
"vision"`), a mask mlx-lm's text model does not take: their tower is refused in one line, and they
serve text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ..errors import SpecmlxError
from ..models.weights import load_into
from .tower import TOWER_WEIGHTS, Picture, VisionTower, processor_file_settings, vision_weights

OWN = ("vision_tower.", "embed_vision.")  # the tower's and its projection's names in mlx-vlm's model
CLIPPED = ("input_max", "input_min", "output_max", "output_min")  # clipped linears' bounds, read where used
PROCESSOR_KEYS = ("patch_size", "max_soft_tokens", "pooling_kernel_size", "do_resize", "do_rescale", "do_normalize",
                  "rescale_factor", "image_mean", "image_std", "size")


class Encoder(nn.Module):
    """The tower and its projection, under mlx-vlm's names."""

    def __init__(self, config: dict) -> None:
        super().__init__()
        from mlx_vlm.models.gemma4.config import VisionConfig
        from mlx_vlm.models.gemma4.gemma4 import MultimodalEmbedder
        from mlx_vlm.models.gemma4.vision import VisionModel

        vision = VisionConfig.from_dict(config["vision_config"])
        self.vision_tower = VisionModel(vision)
        self.embed_vision = MultimodalEmbedder(vision.hidden_size, config["text_config"]["hidden_size"],
                                               eps=vision.rms_norm_eps)

    def __call__(self, pixels: mx.array) -> mx.array:
        return self.embed_vision(self.vision_tower(pixels))


class GemmaTower(VisionTower):
    ARCHITECTURES = ("gemma4",)
    NEEDS = ("image_token_id", "boi_token_id", "eoi_token_id")

    def __init__(self, model: Any, processor: Any, config: dict) -> None:
        super().__init__(model, processor, config)
        self.before, self.after = (config["boi_token_id"],), (config["eoi_token_id"],)
        self.stand_in = 0
        self.scale = config["text_config"]["hidden_size"] ** 0.5  # mlx-lm's gemma4_text `embed_scale`

    @classmethod
    def load(cls, path: Path, config: dict) -> "GemmaTower":
        from mlx_vlm.models.gemma4.processing_gemma4 import Gemma4ImageProcessor

        if config.get("text_config", {}).get("use_bidirectional_attention") == "vision":
            raise SpecmlxError(f"{path}: its images attend both ways within an image, which is not built here; "
                               "it serves text")
        clipped = config["vision_config"].get("use_clipped_linears", False)
        weights = {k: v for k, v in vision_weights(path, cls.weight_name).items()
                   if clipped or not k.endswith(CLIPPED)}
        model = load_into(Encoder(config), weights, config.get("quantization"), path, TOWER_WEIGHTS)
        settings = processor_file_settings(path)
        return cls(model, Gemma4ImageProcessor(**{k: settings[k] for k in PROCESSOR_KEYS if k in settings}), config)

    @staticmethod
    def weight_name(key: str) -> str | None:
        key = key.removeprefix("model.")
        return key if key.startswith(OWN) and "rotary_emb" not in key else None

    def process(self, rgb: Any) -> tuple[np.ndarray, tuple[int, int, int], int]:
        out, rows = self.processor.preprocess([rgb])
        pixels = out["pixel_values"]
        patch = self.processor.patch_size
        return pixels, (1, pixels.shape[-2] // patch, pixels.shape[-1] // patch), int(rows[0])

    def encode(self, picture: Picture) -> mx.array:
        weight = self.model.embed_vision.embedding_projection.weight
        dtype = weight.dtype if mx.issubdtype(weight.dtype, mx.floating) else mx.float32
        rows = self.model(mx.array(picture.pixels).astype(dtype))[0] / self.scale
        mx.eval(rows)
        return rows
