"""Tiny random-weight mlx-lm models and a real byte-level BPE tokenizer, built by the tests."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_map
from mlx_lm.models import gemma3_text, llama, qwen2

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n    print(i * i)\n",
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Speculative decoding drafts tokens and the target verifies them.\n",
    "import numpy as np\nx = np.zeros((3, 4))\n",
    "naïve café — déjà vu, 東京, emoji 🙂\n\t  spaces   and\ttabs\n",
]


def qwen2_args(vocab_size: int, hidden: int = 64, layers: int = 2, **kw) -> qwen2.ModelArgs:
    return qwen2.ModelArgs(
        model_type="qwen2", hidden_size=hidden, num_hidden_layers=layers,
        intermediate_size=2 * hidden, num_attention_heads=4, num_key_value_heads=2,
        rms_norm_eps=1e-6, vocab_size=vocab_size, rope_theta=10000.0,
        tie_word_embeddings=kw.pop("tie_word_embeddings", False), **kw,
    )


def build(args, seed: int, sharpness: float = 4.0) -> nn.Module:
    """A random model of `args`; `sharpness` scales the embeddings so that
    next-token distributions are peaked like a trained model's, not flat."""
    module = {"qwen2": qwen2, "llama": llama, "gemma3_text": gemma3_text}[args.model_type]
    mx.random.seed(seed)
    model = module.Model(args)
    scaled = {
        k: v * sharpness for k, v in tree_flatten(model.parameters())
        if "embed_tokens" in k or "lm_head" in k
    }
    model.load_weights(list(scaled.items()), strict=False)
    mx.eval(model.parameters())
    return model


def tiny_qwen(vocab_size: int, seed: int, **kw) -> nn.Module:
    return build(qwen2_args(vocab_size, **kw), seed)


def perturbed(model: nn.Module, args, noise: float, seed: int) -> nn.Module:
    """A copy of `model` with Gaussian noise on every weight: a drafter that
    agrees with the target often, but not always."""
    copy = type(model)(args)
    mx.random.seed(seed)
    copy.update(tree_map(lambda w: w + noise * mx.random.normal(w.shape) * w.std(), model.parameters()))
    mx.eval(copy.parameters())
    return copy


def gemma3_args(vocab_size: int, window: int = 8) -> gemma3_text.ModelArgs:
    """Gemma 3 text layers: two sliding-window layers, then one global one."""
    return gemma3_text.ModelArgs(
        model_type="gemma3_text", hidden_size=64, num_hidden_layers=3,
        intermediate_size=128, num_attention_heads=2, num_key_value_heads=1,
        head_dim=32, vocab_size=vocab_size, sliding_window=window,
        sliding_window_pattern=3,
    )


def train_tokenizer(vocab_size: int = 320):
    """A real byte-level BPE tokenizer (HF `tokenizers`), trained on CORPUS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )


def save_model(model: nn.Module, args, tokenizer, path: Path) -> Path:
    """Write an mlx-lm model directory that `mlx_lm.load` and the CLI can read."""
    path.mkdir(parents=True, exist_ok=True)
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(path / "model.safetensors"), weights)
    config = {k: v for k, v in vars(args).items() if not k.startswith("_")}
    quant = getattr(model, "_quantization", None)
    if quant:
        config["quantization"] = quant
    (path / "config.json").write_text(json.dumps(config, indent=2))
    tokenizer.save_pretrained(str(path))
    return path
