"""A prompt's images: where each one's rows sit, the prompt's multimodal positions, and what a prefill
feeds for them. Made by `place` from the chat template's token ids (one image token an image); read by
the engine's prefill (`fed`, `rotated`) and its reuse of a cache (`agreement`)."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ..errors import SpecmlxError
from ..hidden import embed
from .rope import rotated_at
from .tower import Picture, VisionTower


@dataclass(frozen=True)
class Span:
    """One image's rows in a prompt: from `start`, `picture.rows` of them."""

    start: int
    picture: Picture

    @property
    def end(self) -> int:
        return self.start + self.picture.rows


@dataclass(frozen=True)
class Images:
    """A prompt's images, its positions end-anchored where its images place them apart from their
    indices ((3, tokens), else None), and `shift`: what its images took back of the positions, by which
    every position is raised (`vision/__init__.py`)."""

    spans: tuple[Span, ...]
    shift: int
    positions: np.ndarray | None = field(compare=False, repr=False)
    tower: VisionTower = field(compare=False, repr=False)

    def fed(self, target: nn.Module, tokens: mx.array, start: int) -> tuple[mx.array, mx.array]:
        """What the target is fed for `tokens` (1, L), the prompt's from `start`: their ids, with the
        tower's stand-in at each image's rows, and their input embeddings, the target's own rows and
        each image's rows where its image tokens are."""
        rows = embed(target, tokens)
        ids = tokens
        end = start + tokens.shape[1]
        for span in self.spans:
            low, high = max(span.start, start), min(span.end, end)
            if low < high:
                seen = self.tower.features(span.picture)[low - span.start:high - span.start].astype(rows.dtype)
                rows = mx.concatenate([rows[:, :low - start], seen[None], rows[:, high - start:]], axis=1)
                stand_in = mx.full((1, high - low), self.tower.stand_in, dtype=ids.dtype)
                ids = mx.concatenate([ids[:, :low - start], stand_in, ids[:, high - start:]], axis=1)
        return ids, rows

    @contextmanager
    def rotated(self, target: nn.Module, start: int, end: int) -> Iterator[None]:
        """Within the block, the target's attention rotates the prompt's tokens start..end-1 at their
        multimodal positions (where the images place them apart from their indices)."""
        if self.positions is None:
            yield
            return
        positions = mx.array(self.positions[:, None, start:end])
        with rotated_at(target, self.tower.rotary, positions):
            yield


def agreement(held: Images | None, asked: Images | None, upto: int) -> int:
    """Of the first `upto` positions two prompts share as tokens, how many a cache of one serves the
    other: none where their images shift positions differently, else up to the first image either holds
    there that the other does not hold at the same place."""
    if (0 if held is None else held.shift) != (0 if asked is None else asked.shift):
        return 0
    mine = {s for s in (held.spans if held else ()) if s.start < upto}
    theirs = {s for s in (asked.spans if asked else ()) if s.start < upto}
    return min([upto, *(s.start for s in mine ^ theirs)])


def place(tower: VisionTower, tokens: Sequence[int], pictures: Sequence[Picture]) -> tuple[list[int], Images | None]:
    """The prompt's token ids with each image token widened to its picture's rows (in order), framed as
    the tower's family frames them, and its images; refused in one line where the template placed a
    different number of images. Without pictures the tokens are the text's as they are (an image token a
    text spells is read as the text model reads it)."""
    if not pictures:
        return list(tokens), None
    at = [i for i, t in enumerate(tokens) if t == tower.image_token]
    if len(at) != len(pictures):
        raise SpecmlxError(f"the chat template placed {len(at)} images, but the messages hold {len(pictures)}")
    out: list[int] = []
    spans: list[Span] = []
    last = 0
    for i, picture in zip(at, pictures):
        out += [*tokens[last:i], *tower.before]
        spans.append(Span(len(out), picture))
        out += [tower.image_token] * picture.rows + list(tower.after)
        last = i + 1
    out += tokens[last:]
    positions, shift = tower.positions(len(out), [(s.start, s.picture) for s in spans])
    return out, Images(tuple(spans), shift, positions, tower)
