"""A checkpoint's vision tower and image processor, mlx-vlm's, read from the target's own directory.
mlx-lm loads the target without it; this loads it beside, from the same files (Hugging Face's layout
or mlx-vlm's) or from what `specmlx convert` keeps of them (`vision.safetensors`). What differs between
checkpoints (their processor, their encoder, how a prompt frames an image's rows, their positions) is
each family's (`qwen.py`, `gemma.py`); this is what they share: reading an image's bytes, keeping the
last few images' rows, and finding the tower's weights. mlx-vlm is an optional dependency
(`pip install 'specmlx[vision]'`): without it a vision checkpoint serves text alone, and says so."""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
import io
import json
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import mlx.core as mx
import numpy as np

from ..errors import SpecmlxError

KEPT = "vision.safetensors"  # what `specmlx convert` writes of the tower beside the converted target
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")
FEATURES_KEPT = 8  # images whose rows stay in memory: an agent sends the same screenshot turn after turn
MAX_SIDE = 16384  # pixels: a larger image is refused before it is decoded
# A tower's weights are loaded as mlx-lm lays a checkpoint out (`models.weights.load_into`): quantized
# where they are (mlx-vlm's conversions may quantize a tower's linear layers)
TOWER_WEIGHTS = "its vision tower's weights"


@dataclass(frozen=True)
class Picture:
    """An image as the tower reads it: its content's digest (what caches key on), its pixels as its
    encoder takes them, its patch grid (t, h, w), and the rows it takes in the prompt."""

    digest: str
    grid: tuple[int, int, int]
    rows: int
    pixels: np.ndarray = field(compare=False, repr=False)


class VisionTower(ABC):
    """The encoder and processor of one checkpoint; `read` runs on any thread, `features` on MLX's. A
    family says how an image is processed and encoded, and how its rows sit in a prompt; one whose
    `positions` are its own also has the `rotary` that turns the attention at them (`qwen.py`)."""

    # Where an image's rows go: the template writes `image_token` once an image; it is widened to
    # `before` + the rows + `after` (the tokens a family's processor frames the rows with).
    before: tuple[int, ...] = ()
    after: tuple[int, ...] = ()
    NEEDS: tuple[str, ...] = ("image_token_id",)  # what a family reads of the checkpoint's config.json

    def __init__(self, model: Any, processor: Any, config: dict) -> None:
        self.model, self.processor, self.config = model, processor, config
        self.image_token: int = config["image_token_id"]
        self.stand_in: int = self.image_token  # the token id fed at an image's rows, beside its embeddings
        self._kept: OrderedDict[str, mx.array] = OrderedDict()

    def read(self, data: bytes, owner: bytes = b"") -> Picture:
        """An image's bytes (PNG, JPEG, WebP, GIF's first frame...) as the tower reads them; an image that
        cannot be decoded is refused in one line (`SpecmlxError`). Its digest is of its `owner`'s bytes and
        its own, so that the rows kept for one client's image never serve (nor time) another's."""
        from PIL import Image, UnidentifiedImageError

        try:
            image = Image.open(io.BytesIO(data))
            if max(image.size) > MAX_SIDE:
                raise SpecmlxError(f"the image is {image.size[0]}x{image.size[1]} pixels; at most {MAX_SIDE} a side")
            pixels, grid, rows = self.process(image.convert("RGB"))
        except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as err:
            raise SpecmlxError(f"the image cannot be read: {err}") from None
        return Picture(hashlib.sha256(owner + b"\0" + data).hexdigest(), grid, rows, pixels)

    @abstractmethod
    def process(self, rgb: Any) -> tuple[np.ndarray, tuple[int, int, int], int]:
        """An RGB image (Pillow's) as the encoder takes it: its pixels, grid and rows (a
        processor's refusal is a ValueError)."""

    @abstractmethod
    def encode(self, picture: Picture) -> mx.array:
        """The picture through the tower: its rows as the target's input embeddings, evaluated."""

    def positions(self, length: int, spans: Sequence[tuple[int, Picture]]) -> tuple[np.ndarray | None, int]:
        """A prompt's positions where its images place them apart from its tokens' indices, and what
        they are shifted by (`vision/__init__.py`); (None, 0): every token at its index, as the text
        model rotates it."""
        return None, 0

    def features(self, picture: Picture) -> mx.array:
        """The picture's rows of input embeddings, (rows, hidden); the last few pictures' are kept."""
        kept = self._kept.get(picture.digest)
        if kept is None:
            kept = self._kept[picture.digest] = self.encode(picture)
            while len(self._kept) > FEATURES_KEPT:
                self._kept.popitem(last=False)
        self._kept.move_to_end(picture.digest)
        return kept


def vision_weights(path: Path, name: Callable[[str], str | None]) -> dict[str, mx.array]:
    """The tower's weights in the checkpoint at `path`, by mlx-vlm's names: from what `specmlx convert`
    kept, else from the checkpoint's own files (Hugging Face's names, or mlx-vlm's). `name`: a
    checkpoint's name as mlx-vlm's, None for a weight not the tower's (its family's `weight_name`)."""
    weights = {}
    for file in ([path / KEPT] if (path / KEPT).exists() else sorted(path.glob("model*.safetensors"))):
        for key, value in mx.load(str(file)).items():
            ours = name(key)
            if ours is not None:
                weights[ours] = value
    if not weights:
        raise SpecmlxError(f"{path} declares a vision tower but holds none of its weights")
    return weights


def processor_file_settings(path: Path) -> dict:
    """The image processor's settings as the checkpoint writes them: `preprocessor_config.json`, and a
    `processor_config.json`'s `image_processor` (which newer checkpoints write), read from disk only."""
    raw: dict = {}
    for name in PROCESSOR_FILES:
        try:
            found = json.loads((path / name).read_text())
        except (OSError, ValueError):
            continue
        raw.update(found.get("image_processor", found) if name == "processor_config.json" else found)
    return raw
