"""An image prompt through the engine: prefilled with the tower's rows at their multimodal positions, then
drafted and verified as text. Its answer is mlx-vlm's own greedy answer (the whole reference model), with any
drafter; a next turn continues its cache; a turn with another image does not reuse what the first one shifted."""

from __future__ import annotations

import dataclasses

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.utils import load as load_text

from specmlx.drafters import ModelDrafter, NoDrafter, PromptLookupDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.policy import DraftPolicy
from specmlx.vision.images import agreement, place
from specmlx.vision.checkpoint import load_vision

from .. import tiny_vision

TOKENS = 12


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    tok = tiny_vision.tokenizer()
    path = tiny_vision.save(tok, tmp_path_factory.mktemp("vlm") / "target")
    model, tokenizer = load_text(str(path))
    return path, model, tokenizer, load_vision(path)


def prompt(checkpoint, turns: list[tuple[str, bytes | None]], answered: list[int] = ()):
    """A chat of user turns (each its text and maybe an image, the image token where it goes), placed; with
    `answered`, the first turn's answer (its tokens) and the turns after it."""
    _, _, tokenizer, tower = checkpoint

    def said(turn: tuple[str, bytes | None]) -> str:
        image = "<|vision_start|><|image_pad|><|vision_end|>" if turn[1] else ""
        return f"<|im_start|>user\n{turn[0]}{image}<|im_end|>\n"

    ask = "<|im_start|>assistant\n"
    raw = tokenizer.encode(said(turns[0]) + ask)
    if len(turns) > 1:
        raw += list(answered) + tokenizer.encode("<|im_end|>\n" + "".join(map(said, turns[1:])) + ask)
    return place(tower, raw, [tower.read(image) for _, image in turns if image])


def answer(engine: Engine, tokens, images, **policy) -> list[int]:
    config = GenerationConfig(max_tokens=TOKENS, images=images, policy=DraftPolicy(**policy))
    return [e.token for event in engine.generate(tokens, config) for e in event.tokens]


def reference(checkpoint, tokens, images) -> list[int]:
    return tiny_vision.reference(checkpoint[0], tokens, [s.picture for s in images.spans], TOKENS)


def test_an_image_prompt_is_answered_as_mlx_vlm_answers_it_whatever_drafts(checkpoint):
    _, model, tokenizer, _ = checkpoint
    tokens, images = prompt(checkpoint, [("Describe it.", tiny_vision.png(0))])
    expected = reference(checkpoint, tokens, images)
    assert answer(Engine(model, NoDrafter(), tokenizer), tokens, images) == expected
    drafted = Engine(model, ModelDrafter(model, len(tokenizer)), tokenizer)  # never sees the image
    assert answer(drafted, tokens, images, num_draft=3) == expected
    assert answer(Engine(model, PromptLookupDrafter(), tokenizer), tokens, images, num_draft=2) == expected


def last_logits(engine: Engine, tokens: list[int], images) -> mx.array:
    """The target's logits at the prompt's last token, after the engine's prefill of the rest."""
    engine.prefill(list(tokens), images=images)
    return engine.target(mx.array([tokens[-1:]]), cache=engine.cache)[0, -1]


def test_the_prefill_is_mlx_vlms_and_the_same_rows_at_text_positions_are_not(checkpoint):
    """The logits after an image prompt are mlx-vlm's to float rounding; with the prompt's positions left as
    text's (the negative control), they are not, so the tests here see where the rows are rotated."""
    _, model, tokenizer, _ = checkpoint
    tokens, images = prompt(checkpoint, [("Describe it.", tiny_vision.png(0))])
    theirs = tiny_vision.reference_logits(checkpoint[0], tokens, [s.picture for s in images.spans])
    ours = last_logits(Engine(model, NoDrafter(), tokenizer), tokens, images)
    assert mx.abs(ours - theirs).max().item() < 1e-4
    flat = dataclasses.replace(images, positions=np.broadcast_to(np.arange(len(tokens)), (3, len(tokens))))
    assert mx.abs(last_logits(Engine(model, NoDrafter(), tokenizer), tokens, flat) - theirs).max().item() > 1e-2


def test_a_next_turn_continues_the_cache_and_another_image_reads_it_again(checkpoint):
    _, model, tokenizer, _ = checkpoint
    engine = Engine(model, ModelDrafter(model, len(tokenizer)), tokenizer)
    first = [("Describe it.", tiny_vision.png(0))]
    tokens, images = prompt(checkpoint, first)
    said = answer(engine, tokens, images, num_draft=2)
    held = len(engine.context)
    more, more_images = prompt(checkpoint, first + [("And its colours?", None)], said)
    assert engine.reusable(more, more_images) >= len(tokens)  # the whole first turn: no second look at the image
    assert answer(engine, more, more_images, num_draft=2) == reference(checkpoint, more, more_images)
    other, other_images = prompt(checkpoint, first + [("And this one?", tiny_vision.png(5, 64, 128))], said)
    assert other_images.shift != more_images.shift
    assert engine.reusable(other, other_images) == 0 < held
    assert answer(engine, other, other_images, num_draft=2) == reference(checkpoint, other, other_images)


def test_images_agree_only_where_they_are_the_same_image_at_the_same_place(checkpoint):
    one, one_images = prompt(checkpoint, [("Look.", tiny_vision.png(0))])
    two, two_images = prompt(checkpoint, [("Look.", tiny_vision.png(1))])  # the same size: the same shift
    start = one_images.spans[0].start
    assert one == two and one_images.shift == two_images.shift
    assert agreement(one_images, two_images, len(one)) == start
    assert agreement(one_images, one_images, len(one)) == len(one)
    assert agreement(None, None, 9) == 9 and agreement(one_images, None, start) == (start if one_images.shift == 0 else 0)
