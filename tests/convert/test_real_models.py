"""Real checkpoints (slow): conversion, config, and logits against a numpy reader of the GGUF.

Reference: `reference.py`, a numpy forward pass written the way llama.cpp computes, over the
GGUF tensors dequantized by the `gguf` package (not mlx-lm's GGUF loader, which cannot
dequantize K-quants, nor transformers' GGUF loader, which needs torch). It shares no code
with the converter.
"""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest

from .conftest import REAL_KEYS
from .reference import GGUFWeights, forward

pytestmark = pytest.mark.slow

FACTS = {  # read from the GGUF files themselves
    "qwen-1.5b": {"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 1536, "num_attention_heads": 12,
                  "num_key_value_heads": 2, "intermediate_size": 8960, "tie_word_embeddings": False,
                  "vocab_size": 151936, "rope_theta": 1e6, "rms_norm_eps": 1e-6},
    "qwen-0.5b": {"model_type": "qwen2", "num_hidden_layers": 24, "hidden_size": 896, "num_attention_heads": 14,
                  "num_key_value_heads": 2, "intermediate_size": 4864, "tie_word_embeddings": False,
                  "vocab_size": 151936, "rope_theta": 1e6, "rms_norm_eps": 1e-6},
    "gemma3-270m": {"model_type": "gemma3_text", "hidden_size": 640, "vocab_size": 262144,
                    "sliding_window_pattern": 6},
}
PROMPTS = [
    "def fibonacci(n):\n    ",
    "The capital of France is",
    "<|im_start|>user\nWrite a haiku about tabs vs spaces.<|im_end|>\n<|im_start|>assistant\n",
]


@pytest.mark.parametrize("key", REAL_KEYS)
def test_converts_with_expected_config(real_model, key):
    model = real_model(key)
    config = json.loads((model.mlx_dir / "config.json").read_text())
    assert {k: config[k] for k in FACTS[key]} == FACTS[key]
    assert config["torch_dtype"] == "float32"  # how long converting took is printed, not asserted: a figure


@pytest.mark.parametrize("key", REAL_KEYS)
def test_logits_match_numpy_reference(real_model, key):
    from mlx_lm import load

    real = real_model(key)
    model, tokenizer = load(str(real.mlx_dir))
    prompts = [tokenizer.encode(p) for p in PROMPTS]
    # HF and mlx-lm multiply Gemma's embeddings by sqrt(hidden) rounded to bfloat16 (25.25 for
    # 640), llama.cpp by the exact 25.298; the reference takes mlx-lm's factor so that what is
    # compared is the conversion. With the exact factor logits differ by up to ~0.1 of ~30.
    hidden = json.loads((real.mlx_dir / "config.json").read_text())["hidden_size"]
    scale = mx.array(hidden**0.5, mx.bfloat16).item() if key.startswith("gemma") else None
    expected = forward(GGUFWeights(real.gguf), prompts, embed_scale=scale)
    for ids, ref in zip(prompts, expected):
        got = np.array(model(mx.array([ids]))[0].astype(mx.float32))
        rel = np.abs(got - ref).max() / np.abs(ref).max()
        print(f"\n{key}: {len(ids)} tokens, max |diff| / max |logit| = {rel:.2e}")
        assert rel < 1e-4
        assert (got.argmax(-1) == ref.argmax(-1)).all()


def test_generates_code(real_model):
    from mlx_lm import generate, load

    model, tokenizer = load(str(real_model("qwen-0.5b").mlx_dir))
    messages = [{"role": "user", "content": "Write a Python function that checks if a number is prime."}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    text = generate(model, tokenizer, prompt=prompt, max_tokens=40)
    assert "def " in text
