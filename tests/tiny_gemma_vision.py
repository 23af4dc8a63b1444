"""A tiny random Gemma 4 vision-language checkpoint, built with mlx-vlm's own classes (`mlx_vlm.models.gemma4`)
and written as Hugging Face's checkpoints hold it: the text model under `model.language_model.`, the tower under
`model.vision_tower.`, its projection under `model.embed_vision.`, the image processor's settings in
`processor_config.json`. The text model is E2B's and E4B's in miniature (sliding and full layers, K/V shared by
the last layers, per-layer inputs, causal attention over images). mlx-lm reads its text model from it, as from a
real one; `specmlx.vision` its tower; mlx-vlm the whole, as the reference the tests compare with."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

from . import tiny
from .tiny_vision import greedy_after, png  # noqa: F401  (png: the same images serve both families' tests)

TEMPLATE = (Path(__file__).parent / "templates" / "gemma4.jinja").read_text(encoding="utf-8")
SPECIALS = tiny.SPECIALS + ["<bos>", "<|turn>", "<turn|>", "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>",
                            "<|tool_response>", "<tool_response|>", '<|"|>', "<|channel>", "<channel|>", "<|think|>",
                            "<|image>", "<|image|>", "<image|>", "<|audio|>"]
LAYERS = ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention"]
SHARP = 0.5  # the embeddings' scale: at full scale a tied random model repeats one token whatever it sees
SOFT_TOKENS = 8  # the processor's budget of rows an image (real checkpoints: 280)
PROCESSOR = {"image_processor": {"patch_size": 16, "max_soft_tokens": SOFT_TOKENS, "pooling_kernel_size": 3,
                                 "do_normalize": False, "do_rescale": True, "rescale_factor": 1 / 255}}


def tokenizer():
    trained = tiny.train_tokenizer(specials=SPECIALS, chat_template=TEMPLATE)
    trained.bos_token = "<bos>"
    return trained


def config(tok, bidirectional: str | None = None) -> dict:
    ids = {name: tok.convert_tokens_to_ids(name) for name in ("<|image>", "<|image|>", "<image|>", "<|audio|>")}
    vocab = len(tok)
    return {
        "model_type": "gemma4", "vocab_size": vocab, "image_token_id": ids["<|image|>"],
        "boi_token_id": ids["<|image>"], "eoi_token_id": ids["<image|>"], "audio_token_id": ids["<|audio|>"],
        "vision_soft_tokens_per_image": SOFT_TOKENS, "tie_word_embeddings": True,
        "text_config": {
            "model_type": "gemma4_text", "hidden_size": 64, "num_hidden_layers": len(LAYERS), "intermediate_size": 128,
            "num_attention_heads": 4, "head_dim": 16, "global_head_dim": 32, "num_key_value_heads": 2,
            "num_kv_shared_layers": 2, "hidden_size_per_layer_input": 8, "vocab_size": vocab,
            "vocab_size_per_layer_input": vocab, "sliding_window": 8, "layer_types": LAYERS,
            "final_logit_softcapping": 30.0, "use_double_wide_mlp": False, "tie_word_embeddings": True,
            "use_bidirectional_attention": bidirectional, "rms_norm_eps": 1e-6,
            "rope_parameters": {
                "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
                "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}}},
        "vision_config": {
            "model_type": "gemma4_vision", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 16, "global_head_dim": 16,
            "patch_size": 16, "pooling_kernel_size": 3, "position_embedding_size": 64,
            "default_output_length": SOFT_TOKENS, "rms_norm_eps": 1e-6}}


def save(tok, path: Path, seed: int = 5, bidirectional: str | None = None) -> Path:
    """The checkpoint directory; its embeddings sharpened so that answers are peaked, its patches' position
    table random (mlx-vlm starts it at ones)."""
    from mlx_vlm.models.gemma4.config import ModelConfig, TextConfig, VisionConfig
    from mlx_vlm.models.gemma4.gemma4 import Model

    settings = config(tok, bidirectional)
    mx.random.seed(seed)
    whole = ModelConfig.from_dict(settings)
    whole.text_config = TextConfig.from_dict(settings["text_config"])
    whole.vision_config = VisionConfig.from_dict(settings["vision_config"])
    model = Model(whole)
    weights = {}
    for key, value in tree_flatten(model.parameters()):
        if key.endswith("embed_tokens.weight"):
            value = value * SHARP
        if key.endswith("position_embedding_table"):
            value = mx.random.normal(value.shape) * 0.5
        if key.startswith("language_model.model."):
            key = "model.language_model." + key.removeprefix("language_model.model.")
        else:
            key = "model." + key
        weights[key] = value
    path.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(path / "model.safetensors"), weights)
    (path / "config.json").write_text(json.dumps(settings))
    (path / "processor_config.json").write_text(json.dumps(PROCESSOR))
    tok.save_pretrained(str(path))
    return path


def reference(path: Path, tokens: list[int], pictures: list, n: int) -> list[int]:
    """mlx-vlm's own greedy answer to a prompt (its images' rows already in place) with `pictures`
    (`specmlx.vision.tower.Picture`, in order): its whole model, its embeddings, its cache."""
    return greedy_after(*_prefilled(path, tokens, pictures), n)


def reference_logits(path: Path, tokens: list[int], pictures: list) -> mx.array:
    """mlx-vlm's logits at the prompt's last token."""
    return _prefilled(path, tokens, pictures)[2]


def _prefilled(path: Path, tokens: list[int], pictures: list):
    from mlx_vlm.utils import load_model

    model = load_model(path)
    cache = model.language_model.make_cache()
    out = model(mx.array([tokens]), pixel_values=[mx.array(p.pixels[0]) for p in pictures], cache=cache)
    return model, cache, out.logits[0, -1]
