"""A tiny random Qwen3.5 vision-language checkpoint, built with mlx-vlm's own classes (`mlx_vlm.models.qwen3_5`)
and written as Hugging Face's checkpoints hold it: the text model under `model.language_model.`, the vision
tower under `model.visual.`, zero-centred norms, the convolutions' kernels as PyTorch orders them, and the image
processor's settings in `preprocessor_config.json`. mlx-lm reads its text model from it, as from a real one;
`specmlx.vision` its tower; mlx-vlm the whole, as the reference the tests compare with."""

from __future__ import annotations

import io
import json
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from . import tiny

VISION_SPECIALS = ["<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|video_pad|>"]
PATCH, MERGE = 16, 2


def tokenizer(chat_template: str = tiny.CHAT_TEMPLATE):
    return tiny.train_tokenizer(specials=tiny.SPECIALS + VISION_SPECIALS, chat_template=chat_template)


def config(tok) -> dict:
    """Qwen3.5's `config.json` in miniature: a text model of Gated DeltaNet and attention layers whose
    rotation has three interleaved sections (time, height, width), and a two-block vision tower."""
    ids = {name: tok.convert_tokens_to_ids(name) for name in VISION_SPECIALS}
    vocab = len(tok)
    return {
        "model_type": "qwen3_5", "vocab_size": vocab, "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"], "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "text_config": {
            "model_type": "qwen3_5_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "rms_norm_eps": 1e-6,
            "vocab_size": vocab, "max_position_embeddings": 4096, "linear_num_value_heads": 4,
            "linear_num_key_heads": 2, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
            "linear_conv_kernel_dim": 4, "full_attention_interval": 2, "tie_word_embeddings": False,
            "rope_parameters": {"type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                                "mrope_section": [3, 3, 2], "mrope_interleaved": True}},
        "vision_config": {
            "model_type": "qwen3_5", "depth": 2, "hidden_size": 32, "intermediate_size": 64, "out_hidden_size": 64,
            "num_heads": 2, "patch_size": PATCH, "spatial_merge_size": MERGE, "temporal_patch_size": 2,
            "in_channels": 3, "num_position_embeddings": 64, "deepstack_visual_indexes": []}}


PROCESSOR = {"patch_size": PATCH, "temporal_patch_size": 2, "merge_size": MERGE, "image_mean": [0.5] * 3,
             "image_std": [0.5] * 3, "size": {"shortest_edge": 32 * 32, "longest_edge": 128 * 128}}


def save(tok, path: Path, seed: int = 3) -> Path:
    """The checkpoint directory; its head and embeddings sharpened (`tiny.build`) so answers are peaked."""
    from mlx_vlm.models.qwen3_5.config import ModelConfig
    from mlx_vlm.models.qwen3_5.qwen3_5 import NORM_WEIGHT_SUFFIXES, Model

    settings = config(tok)
    mx.random.seed(seed)
    model = Model(ModelConfig.from_dict(settings))
    weights = {}
    for key, value in tree_flatten(model.parameters()):
        if "embed_tokens" in key or "lm_head" in key:
            value = value * 4.0
        if key.startswith("language_model.model."):
            key = "model.language_model." + key.removeprefix("language_model.model.")
        elif key.startswith("language_model.lm_head"):
            key = "lm_head" + key.removeprefix("language_model.lm_head")
        else:
            key = "model.visual." + key.removeprefix("vision_tower.")
        if "conv1d.weight" in key:
            value = value.moveaxis(2, 1)
        if key.endswith("patch_embed.proj.weight"):
            value = value.transpose(0, 4, 1, 2, 3)  # PyTorch's (out, in, t, h, w)
        if key.endswith(NORM_WEIGHT_SUFFIXES) and value.ndim == 1:
            value = value - 1.0
        weights[key] = value
    path.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(path / "model.safetensors"), weights)
    (path / "config.json").write_text(json.dumps(settings))
    (path / "preprocessor_config.json").write_text(json.dumps(PROCESSOR))
    tok.save_pretrained(str(path))
    return path


def png(seed: int, width: int = 96, height: int = 64) -> bytes:
    """A random RGB image as PNG bytes."""
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def reference(path: Path, tokens: list[int], pictures: list, n: int) -> list[int]:
    """mlx-vlm's own greedy answer to a prompt (its image tokens already widened) with `pictures`
    (`specmlx.vision.tower.Picture`, in order): its whole model, its positions, its cache."""
    return greedy_after(*_prefilled(path, tokens, pictures), n)


def greedy_after(model, cache, logits: mx.array, n: int) -> list[int]:
    """`n` greedy tokens of mlx-vlm's `model` from a prefilled `cache` and the prompt's last `logits`."""
    answer = [int(logits.argmax())]
    while len(answer) < n:
        answer.append(int(model.language_model(mx.array([answer[-1:]]), cache=cache).logits[0, -1].argmax()))
    return answer


def reference_logits(path: Path, tokens: list[int], pictures: list) -> mx.array:
    """mlx-vlm's logits at the prompt's last token."""
    return _prefilled(path, tokens, pictures)[2]


def _prefilled(path: Path, tokens: list[int], pictures: list):
    from mlx_vlm.utils import load_model

    model = load_model(path)
    ids = mx.array([tokens])
    pixels = mx.array(np.concatenate([p.pixels for p in pictures]))
    embedded = model.get_input_embeddings(ids, pixels, image_grid_thw=mx.array([p.grid for p in pictures]))
    cache = model.language_model.make_cache()
    # Its decode steps place each token at its cache offset plus these deltas (what the images took back).
    out = model.language_model(ids, inputs_embeds=embedded.inputs_embeds, cache=cache,
                               position_ids=embedded.position_ids, rope_deltas=embedded.rope_deltas)
    return model, cache, out.logits[0, -1]
