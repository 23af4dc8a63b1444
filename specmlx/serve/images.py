"""A request's images: read from its data URLs and placed in its prompt for the model's vision tower
(`vision`). Nothing is downloaded: an image by address is refused in one line, as is one a model without
a tower is sent (by its place, as any part not served)."""

from __future__ import annotations

import base64
import binascii
from typing import Hashable
from ..errors import SpecmlxError
from ..vision.images import Images, place
from ..vision.tower import Picture, VisionTower
from .errors import APIError
from .openai.protocol import ChatRequest, ImagePart

DATA = "data:"


def picture_bytes(url: str, where: str) -> bytes:
    """The bytes of an image given as a data URL (`data:image/png;base64,...`); refused (400) naming `where`."""
    if not url.startswith(DATA):
        raise APIError(400, f"{where}: images are read from data URLs only (data:image/png;base64,...): this "
                       "server downloads nothing", "invalid_value", where)
    head, _, payload = url.partition(",")
    if not head.endswith(";base64"):
        raise APIError(400, f"{where}: an image's data URL must be base64 (data:<media type>;base64,...)",
                       "invalid_value", where)
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise APIError(400, f"{where}: the image's data is not base64", "invalid_value", where) from None


def pictures(request: ChatRequest, tower: VisionTower, owner: Hashable = None) -> list[Picture]:
    """The request's images in the order its messages hold them, read by `tower` for `owner`."""
    found = []
    for i, message in enumerate(request.messages):
        for j, part in enumerate(message.content if isinstance(message.content, list) else ()):
            if isinstance(part, ImagePart):
                where = f"messages.{i}.content.{j}.image_url.url"
                try:
                    found.append(tower.read(picture_bytes(part.image_url.url, where), repr(owner).encode()))
                except SpecmlxError as err:
                    raise APIError(400, f"{where}: {err}", "invalid_value", where) from None
    return found


def placed(tokens: list[int], request: ChatRequest, tower: VisionTower | None,
           owner: Hashable = None) -> tuple[list[int], Images | None]:
    """The prompt's tokens with its images' rows in place, and its images (None without any, or without a
    tower: a model without one is refused an image by the template's messages, `tools.template_messages`);
    read for `owner` (the caller's API key's id: `VisionTower.read`)."""
    if tower is None:
        return tokens, None
    try:
        return place(tower, tokens, pictures(request, tower, owner))
    except SpecmlxError as err:
        raise APIError(400, str(err), "invalid_value", "messages") from None
