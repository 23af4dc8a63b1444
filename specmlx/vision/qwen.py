"""Qwen3.5's and Qwen3.6's tower: mlx-vlm's Qwen3-VL encoder and numpy image processor. An image is a
(t, h, w) grid of patches, merged 2 x 2 into rows, which the prompt places on that grid (multimodal
RoPE, `positions.py`): the one family whose positions differ from its tokens' indices."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import mlx.core as mx
import numpy as np

from .positions import end_anchored, mrope_positions
from ..models.weights import load_into
from .tower import TOWER_WEIGHTS, Picture, VisionTower, processor_file_settings, vision_weights

PREFIX = "vision_tower."  # the tower's weights' names in mlx-vlm's model, and in what convert keeps


class QwenTower(VisionTower):
    ARCHITECTURES = ("qwen3_5", "qwen3_5_moe")

    def __init__(self, model: Any, processor: Any, config: dict) -> None:
        super().__init__(model, processor, config)
        self.merge: int = config["vision_config"].get("spatial_merge_size", 2)
        self._rotary: Any = None

    @classmethod
    def load(cls, path: Path, config: dict) -> "QwenTower":
        from mlx_vlm.models.qwen3_5.config import VisionConfig
        from mlx_vlm.models.qwen3_5.vision import VisionModel
        from mlx_vlm.models.qwen3_vl.processing_qwen3_vl import Qwen3VLImageProcessor

        model = VisionModel(VisionConfig.from_dict(config["vision_config"]))
        weights = {k.removeprefix(PREFIX): v for k, v in vision_weights(path, cls.weight_name).items()}
        model = load_into(model, model.sanitize(weights), config.get("quantization"), path, TOWER_WEIGHTS)
        return cls(model, Qwen3VLImageProcessor(**processor_settings(path)), config)

    @staticmethod
    def weight_name(key: str) -> str | None:
        from mlx_vlm.models.qwen3_5.qwen3_5 import sanitize_key

        key = sanitize_key(key)
        return key if key.startswith(PREFIX) else None

    def process(self, rgb: Any) -> tuple[np.ndarray, tuple[int, int, int], int]:
        out = self.processor([np.asarray(rgb).transpose(2, 0, 1)])  # refuses a side over 200 times the other
        grid = tuple(int(n) for n in out["image_grid_thw"][0])
        return out["pixel_values"], grid, grid[0] * grid[1] * grid[2] // self.merge ** 2

    def encode(self, picture: Picture) -> mx.array:
        weight = self.model.patch_embed.proj.weight
        rows, _ = self.model(mx.array(picture.pixels).astype(weight.dtype), mx.array([picture.grid]))
        mx.eval(rows)
        return rows

    def positions(self, length: int, spans: Sequence[tuple[int, Picture]]) -> tuple[np.ndarray | None, int]:
        return end_anchored(mrope_positions(length, [(start, p.grid) for start, p in spans], self.merge))

    @property
    def rotary(self) -> Any:
        """The target's multimodal rotation (`rope.py`), made on first use."""
        if self._rotary is None:
            from .rope import multimodal_rotary

            self._rotary = multimodal_rotary(self.config["text_config"])
        return self._rotary


def processor_settings(path: Path) -> dict:
    """Qwen3-VL's image processor's settings from the checkpoint's files."""
    raw = processor_file_settings(path)
    settings = {k: raw[k] for k in ("patch_size", "temporal_patch_size", "merge_size", "image_mean", "image_std",
                                    "rescale_factor", "do_rescale", "do_normalize") if k in raw}
    size = raw.get("size") or {}
    for ours, theirs in (("min_pixels", "shortest_edge"), ("max_pixels", "longest_edge")):
        value = raw.get(ours, size.get(theirs))
        if value is not None:
            settings[ours] = value
    return settings
