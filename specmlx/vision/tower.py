"""A checkpoint's vision tower: mlx-vlm's Qwen3-VL encoder (which Qwen3.5 and Qwen3.6 keep) and its
image processor, read from the target's own directory. mlx-lm loads the target without it; this
loads it beside, from the same files (`model.visual.*`, Hugging Face's layout) or from what
`specmlx convert` keeps of them (`vision.safetensors`). mlx-vlm is an optional dependency
(`pip install 'specmlx[vision]'`): without it a vision checkpoint serves text alone, and says so."""

from __future__ import annotations

import hashlib
import io
import json
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from ..errors import SpecmlxError

KEPT = "vision.safetensors"  # what `specmlx convert` writes of the tower beside the converted target
PREFIX = "vision_tower."  # the tower's weights' names in mlx-vlm's model, and in KEPT
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")
ARCHITECTURES = ("qwen3_5", "qwen3_5_moe")
FEATURES_KEPT = 8  # images whose rows stay in memory: an agent sends the same screenshot turn after turn
MAX_SIDE = 16384  # pixels: a larger image is refused before it is decoded


@dataclass(frozen=True)
class Picture:
    """An image as the tower reads it: its content's digest (what caches key on), its patches, its
    patch grid (t, h, w), and the rows it takes in the prompt."""

    digest: str
    grid: tuple[int, int, int]
    rows: int
    pixels: np.ndarray = field(compare=False, repr=False)


def has_vision(path: Path) -> bool:
    """Whether the checkpoint at `path` declares a vision tower of an architecture read here."""
    config = _config(path)
    return config.get("model_type") in ARCHITECTURES and isinstance(config.get("vision_config"), dict)


class VisionTower:
    """The encoder and processor of one checkpoint; `read` runs on any thread, `features` on MLX's."""

    def __init__(self, model: Any, processor: Any, config: dict) -> None:
        self.model, self.processor, self.config = model, processor, config
        self.image_token: int = config["image_token_id"]
        self.merge: int = config["vision_config"].get("spatial_merge_size", 2)
        self._kept: OrderedDict[str, mx.array] = OrderedDict()
        self._rotary: Any = None

    @property
    def rotary(self) -> Any:
        """The target's multimodal rotation (`rope.py`), made on first use."""
        if self._rotary is None:
            from .rope import multimodal_rotary

            self._rotary = multimodal_rotary(self.config["text_config"])
        return self._rotary

    def read(self, data: bytes, owner: bytes = b"") -> Picture:
        """An image's bytes (PNG, JPEG, WebP, GIF's first frame...) as the tower reads them; an image that
        cannot be decoded is refused in one line (`SpecmlxError`). Its digest is of its `owner`'s bytes and
        its own, so that the rows kept for one client's image never serve (nor time) another's."""
        from PIL import Image, UnidentifiedImageError

        try:
            image = Image.open(io.BytesIO(data))
            if max(image.size) > MAX_SIDE:
                raise SpecmlxError(f"the image is {image.size[0]}x{image.size[1]} pixels; at most {MAX_SIDE} a side")
            rgb = image.convert("RGB")
            out = self.processor([np.asarray(rgb).transpose(2, 0, 1)])  # refuses a side over 200 times the other
        except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as err:
            raise SpecmlxError(f"the image cannot be read: {err}") from None
        grid = tuple(int(n) for n in out["image_grid_thw"][0])
        rows = grid[0] * grid[1] * grid[2] // self.merge ** 2
        return Picture(hashlib.sha256(owner + b"\0" + data).hexdigest(), grid, rows, out["pixel_values"])

    def features(self, picture: Picture) -> mx.array:
        """The picture's rows of input embeddings, (rows, hidden); the last few pictures' are kept."""
        kept = self._kept.get(picture.digest)
        if kept is None:
            kept = self._kept[picture.digest] = self.encode(picture)
            while len(self._kept) > FEATURES_KEPT:
                self._kept.popitem(last=False)
        self._kept.move_to_end(picture.digest)
        return kept

    def encode(self, picture: Picture) -> mx.array:
        """The picture through the tower, evaluated (`features` keeps what this makes)."""
        weight = self.model.patch_embed.proj.weight
        rows, _ = self.model(mx.array(picture.pixels).astype(weight.dtype), mx.array([picture.grid]))
        mx.eval(rows)
        return rows


def load_vision(path: Path) -> VisionTower:
    """The vision tower of the checkpoint at `path` (`has_vision`); refused in one line where mlx-vlm is
    missing or the directory lacks its weights."""
    config = _config(path)
    try:
        from mlx_vlm.models.qwen3_5.config import VisionConfig
        from mlx_vlm.models.qwen3_5.vision import VisionModel
        from mlx_vlm.models.qwen3_vl.processing_qwen3_vl import Qwen3VLImageProcessor
    except ImportError:
        raise SpecmlxError("reading images needs mlx-vlm: pip install 'specmlx[vision]'") from None
    model = VisionModel(VisionConfig.from_dict(config["vision_config"]))
    try:
        model.load_weights(list(model.sanitize(vision_weights(path)).items()), strict=True)
    except ValueError as err:
        raise SpecmlxError(f"{path}: its vision tower's weights do not fit its config: {err}") from None
    mx.eval(model.parameters())
    return VisionTower(model, Qwen3VLImageProcessor(**processor_settings(path)), config)


def vision_weights(path: Path) -> dict[str, mx.array]:
    """The tower's weights in the checkpoint at `path`, by mlx-vlm's names within the tower: from what `specmlx
    convert` kept, else from the checkpoint's own files (Hugging Face's names, or mlx-vlm's)."""
    from mlx_vlm.models.qwen3_5.qwen3_5 import sanitize_key

    weights = {}
    for file in ([path / KEPT] if (path / KEPT).exists() else sorted(path.glob("model*.safetensors"))):
        for key, value in mx.load(str(file)).items():
            key = sanitize_key(key)
            if key.startswith(PREFIX):
                weights[key.removeprefix(PREFIX)] = value
    if not weights:
        raise SpecmlxError(f"{path} declares a vision tower but holds none of its weights")
    if any(key.endswith(".scales") for key in weights):
        raise SpecmlxError(f"{path}: a quantized vision tower is not read here")
    return weights


def processor_settings(path: Path) -> dict:
    """The image processor's settings from the checkpoint's `preprocessor_config.json` (and a
    `processor_config.json`'s `image_processor`, which newer checkpoints write), read from disk only."""
    raw: dict = {}
    for name in PROCESSOR_FILES:
        try:
            found = json.loads((path / name).read_text())
        except (OSError, ValueError):
            continue
        raw.update(found.get("image_processor", found) if name == "processor_config.json" else found)
    settings = {k: raw[k] for k in ("patch_size", "temporal_patch_size", "merge_size", "image_mean", "image_std",
                                    "rescale_factor", "do_rescale", "do_normalize") if k in raw}
    size = raw.get("size") or {}
    for ours, theirs in (("min_pixels", "shortest_edge"), ("max_pixels", "longest_edge")):
        value = raw.get(ours, size.get(theirs))
        if value is not None:
            settings[ours] = value
    return settings


def _config(path: Path) -> dict:
    try:
        return json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return {}
