"""A Gemma 4 image prompt through the engine (`specmlx/vision/gemma.py`): the tower's rows framed by the image's
begin and end tokens, fed descaled beside the stand-in token the per-layer inputs read, at the tokens' own
positions. Its answer is mlx-vlm's own greedy answer (the whole reference model), with any drafter, the
preset's own (a Gemma 4 assistant) included; a next turn continues its cache, and a turn adding an image
reuses the conversation before it (positions are not shifted, so nothing before an image changes)."""

from __future__ import annotations

import copy

import mlx.core as mx
import pytest
from mlx_lm.utils import load as load_text

from specmlx.drafters import ModelDrafter, NoDrafter, PromptLookupDrafter
from specmlx.drafters.gemma4_assistant import Gemma4AssistantDrafter
from specmlx.engine import Engine
from specmlx.errors import SpecmlxError
from specmlx.vision.images import place
from specmlx.vision.checkpoint import has_vision, load_vision

from .. import tiny, tiny_gemma_vision
from .test_engine import TOKENS, answer, last_logits


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    tok = tiny_gemma_vision.tokenizer()
    path = tiny_gemma_vision.save(tok, tmp_path_factory.mktemp("gemma-vlm") / "target")
    model, tokenizer = load_text(str(path))
    return path, model, tokenizer, load_vision(path)


def prompt(checkpoint, turns: list[tuple[str, bytes | None]], answered: list[int] = (), tower=None):
    """A chat of user turns in Gemma 4's form (each its text and maybe an image, where its template puts one),
    placed; with `answered`, the first turn's answer and the turns after it."""
    _, _, tokenizer, own = checkpoint
    tower = tower or own

    def said(turn: tuple[str, bytes | None]) -> str:
        return f"<|turn>user\n{turn[0]}" + ("\n\n<|image|>\n\n" if turn[1] else "") + "<turn|>\n"

    ask = "<|turn>model\n"
    raw = tokenizer.encode(said(turns[0]) + ask)
    if len(turns) > 1:
        raw += list(answered) + tokenizer.encode("<turn|>\n" + "".join(map(said, turns[1:])) + ask)
    return place(tower, raw, [tower.read(image) for _, image in turns if image])


def reference(checkpoint, tokens, images) -> list[int]:
    return tiny_gemma_vision.reference(checkpoint[0], tokens, [s.picture for s in images.spans], TOKENS)


def test_an_image_is_framed_by_its_begin_and_end_tokens(checkpoint):
    _, _, tokenizer, tower = checkpoint
    tokens, images = prompt(checkpoint, [("Look.", tiny_gemma_vision.png(0))])
    span = images.spans[0]
    assert span.picture.rows == 6 and span.picture.grid == (1, 6, 9)  # 96 x 64 resized to 144 x 96: 6 pools of 3 x 3
    assert tokens[span.start - 1] == tower.before[0] == tokenizer.convert_tokens_to_ids("<|image>")
    assert tokens[span.start:span.end] == [tower.image_token] * 6
    assert tokens[span.end] == tower.after[0] == tokenizer.convert_tokens_to_ids("<image|>")
    assert images.positions is None and images.shift == 0
    assert tower.features(span.picture).shape == (6, 64)


def test_the_prefill_is_mlx_vlms_and_each_difference_from_text_is_needed(checkpoint):
    """The logits after an image prompt are mlx-vlm's to float rounding. The negative controls: the image's
    rows left at the scale mlx-vlm gives them (mlx-lm's model scales them again), and the image token itself
    read by the per-layer inputs where mlx-vlm reads 0: each moves the logits."""
    _, model, tokenizer, tower = checkpoint
    tokens, images = prompt(checkpoint, [("Describe it.", tiny_gemma_vision.png(0))])
    theirs = tiny_gemma_vision.reference_logits(checkpoint[0], tokens, [s.picture for s in images.spans])
    assert mx.abs(last_logits(Engine(model, NoDrafter(), tokenizer), tokens, images) - theirs).max().item() < 1e-4
    for broken in ("scale", "stand_in"):
        other = copy.copy(tower)
        other._kept = type(tower._kept)()
        setattr(other, broken, 1.0 if broken == "scale" else tower.image_token)
        wrong, wrong_images = prompt(checkpoint, [("Describe it.", tiny_gemma_vision.png(0))], tower=other)
        ours = last_logits(Engine(model, NoDrafter(), tokenizer), wrong, wrong_images)
        assert mx.abs(ours - theirs).max().item() > 1e-2, broken


def assistant(model, tokenizer) -> Gemma4AssistantDrafter:
    """A random Gemma 4 assistant for the checkpoint's text model: the preset's kind of drafter."""
    return Gemma4AssistantDrafter(tiny.gemma4_assistant(model.language_model.args, seed=2), len(tokenizer))


def test_an_image_is_answered_as_mlx_vlm_answers_it_whatever_drafts(checkpoint):
    _, model, tokenizer, _ = checkpoint
    for image in (tiny_gemma_vision.png(0), tiny_gemma_vision.png(1)):
        tokens, images = prompt(checkpoint, [("Describe it.", image)])
        expected = reference(checkpoint, tokens, images)
        assert len(set(expected)) > 2  # an answer of its own, not one token over and over
        assert answer(Engine(model, NoDrafter(), tokenizer), tokens, images) == expected
        drafted = Engine(model, ModelDrafter(model, len(tokenizer)), tokenizer)  # never sees the image
        assert answer(drafted, tokens, images, num_draft=3) == expected
        assert answer(Engine(model, PromptLookupDrafter(), tokenizer), tokens, images, num_draft=2) == expected
        assert answer(Engine(model, assistant(model, tokenizer), tokenizer), tokens, images, num_draft=3) == expected


def test_a_next_turn_continues_the_cache_and_a_new_image_keeps_what_precedes_it(checkpoint):
    _, model, tokenizer, _ = checkpoint
    engine = Engine(model, assistant(model, tokenizer), tokenizer)
    first = [("Describe it.", tiny_gemma_vision.png(0))]
    tokens, images = prompt(checkpoint, first)
    said = answer(engine, tokens, images, num_draft=2)
    more, more_images = prompt(checkpoint, first + [("And its colours?", None)], said)
    assert engine.reusable(more, more_images) >= len(tokens)  # the whole first turn: no second look at the image
    assert answer(engine, more, more_images, num_draft=2) == reference(checkpoint, more, more_images)
    other, other_images = prompt(checkpoint, first + [("And this one?", tiny_gemma_vision.png(5, 64, 128))], said)
    new = other_images.spans[1].start
    assert len(tokens) < engine.reusable(other, other_images) <= new  # up to the new image, not past it
    assert answer(engine, other, other_images, num_draft=2) == reference(checkpoint, other, other_images)


def test_a_checkpoint_without_its_image_tokens_is_one_line(tmp_path):
    import json

    path = tiny_gemma_vision.save(tiny_gemma_vision.tokenizer(), tmp_path / "target")
    config = json.loads((path / "config.json").read_text())
    del config["eoi_token_id"]
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(SpecmlxError, match="lacks eoi_token_id, which place an image's rows"):
        load_vision(path)


def test_a_checkpoint_whose_images_attend_both_ways_serves_text_and_says_so(tmp_path):
    path = tiny_gemma_vision.save(tiny_gemma_vision.tokenizer(), tmp_path / "target", bidirectional="vision")
    assert has_vision(path)
    with pytest.raises(SpecmlxError, match="attend both ways within an image.*serves text"):
        load_vision(path)
