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
# Qwen2.5's tool calling in miniature: its tools block, its calls (`<tool_call>` JSON `</tool_call>`, the
# arguments written by `tojson`) and its tool results; mlx-lm reads its parser (json_tools) from this.
TOOL_SPECIALS = ["<tool_call>", "</tool_call>"]
TOOL_TEMPLATE = (  # a new line right after a block tag is dropped (trim_blocks): those are written as {{ NL }}
    "{% set NL = '\\n' %}{% if tools %}<|im_start|>system\n<tools>{% for tool in tools %}{{ NL }}{{ tool | tojson }}"
    "{% endfor %}{{ NL }}</tools><|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant"
    "{% if m.content %}{{ NL }}{{ m.content }}{% endif %}"
    "{% for tool_call in m.tool_calls %}{% if tool_call.function is defined %}{% set tool_call = tool_call.function %}"
    "{% endif %}{{ NL }}<tool_call>\n{\"name\": \"{{ tool_call.name }}\", \"arguments\": "
    "{{ tool_call.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
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


def train_tokenizer(vocab_size: int = 320, specials: list[str] = SPECIALS, chat_template: str = CHAT_TEMPLATE):
    """A real byte-level BPE tokenizer (HF `tokenizers`), trained on CORPUS, with `specials` first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        chat_template=chat_template,
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


def mtp(target_args, seed: int, draft_vocab: int | None = None, layers: int = 1, fused_layers: tuple = ()):
    """A random specmlx MTP head for a tiny target; `draft_vocab` < vocab drafts
    from a subset (every other id, then the rest), as trained heads do. With
    `fused_layers` it fuses what enters those target layers (random fusion weights)."""
    from specmlx.models.mtp import MTPConfig, MTPModel

    vocab = target_args.vocab_size
    size = draft_vocab or vocab
    config = MTPConfig(
        target_hidden_size=target_args.hidden_size, target_vocab_size=vocab,
        hidden_size=target_args.hidden_size, intermediate_size=2 * target_args.hidden_size,
        num_attention_heads=4, num_key_value_heads=2, num_layers=layers, draft_vocab_size=size,
        rope_theta=10000.0, fused_layers=tuple(fused_layers),
    )
    mx.random.seed(seed)
    model = MTPModel(config)
    order = list(range(0, vocab, 2)) + list(range(1, vocab, 2))
    model.set_draft_ids(mx.array(sorted(order[:size]), dtype=mx.int32))
    mx.eval(model.parameters())
    return model


# ---- Gemma 4 targets and their assistant drafters ----

GEMMA4_LAYERS = ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention"]


def gemma4_args(vocab_size: int, window: int = 8, hidden: int = 64):
    """A Gemma 4 text target shaped like E2B/E4B in miniature: sliding and full
    layers with different head dims, proportional RoPE on the full ones, the
    last two layers reusing earlier layers' K/V, per-layer inputs, softcap."""
    from mlx_lm.models import gemma4_text

    return gemma4_text.ModelArgs(
        model_type="gemma4_text", hidden_size=hidden, num_hidden_layers=len(GEMMA4_LAYERS),
        intermediate_size=2 * hidden, num_attention_heads=4, head_dim=16, global_head_dim=32,
        num_key_value_heads=2, num_kv_shared_layers=2, hidden_size_per_layer_input=8,
        vocab_size=vocab_size, vocab_size_per_layer_input=vocab_size, sliding_window=window,
        layer_types=list(GEMMA4_LAYERS), final_logit_softcapping=30.0,
        tie_word_embeddings=False,  # a tied random model just repeats its last token
    )


def gemma4_target(args, seed: int, sharpness: float = 4.0) -> nn.Module:
    """A random Gemma 4 text model; `sharpness` as in `build`."""
    from mlx_lm.models import gemma4_text

    mx.random.seed(seed)
    model = gemma4_text.Model(args)
    head = model.model.embed_tokens if args.tie_word_embeddings else model.lm_head
    head.weight = head.weight * sharpness
    mx.eval(model.parameters())
    return model


def gemma4_assistant_config(target_args, ordered: bool = False, centroids: int = 8, top_k: int = 3,
                            window: int | None = None) -> dict:
    """An assistant's config.json (HF layout, released field names) for a tiny target."""
    return {
        "architectures": ["Gemma4AssistantForCausalLM"],
        "model_type": "gemma4_assistant",
        "backbone_hidden_size": target_args.hidden_size,
        "use_ordered_embeddings": ordered,
        "num_centroids": centroids,
        "centroid_intermediate_top_k": top_k,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "text_config": {
            "model_type": "gemma4_text",
            "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
            "num_key_value_heads": target_args.num_key_value_heads, "head_dim": target_args.head_dim,
            "global_head_dim": target_args.global_head_dim, "num_hidden_layers": 4,
            "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
            "sliding_window": window or target_args.sliding_window,
            "rope_parameters": target_args.rope_parameters, "rms_norm_eps": 1e-6,
            "vocab_size": target_args.vocab_size, "hidden_size_per_layer_input": 0,
            "enable_moe_block": False, "use_double_wide_mlp": False, "attention_k_eq_v": False,
            "num_kv_shared_layers": 4, "final_logit_softcapping": 30.0,
        },
    }


def gemma4_assistant(target_args, seed: int, ordered: bool = False, sharpness: float = 4.0, **kw):
    """A random assistant for a tiny Gemma 4 target; with `ordered`, a centroid
    head whose clusters are a fixed shuffle of the vocabulary."""
    from specmlx.models.gemma4_assistant import AssistantConfig, Gemma4AssistantModel

    config = AssistantConfig.from_dict(gemma4_assistant_config(target_args, ordered=ordered, **kw))
    mx.random.seed(seed)
    model = Gemma4AssistantModel(config)
    model.model.embed_tokens.weight = model.model.embed_tokens.weight * sharpness
    if ordered:
        model.masked_embedding.set_token_ordering(mx.random.permutation(config.text.vocab_size))
    mx.eval(model.parameters())
    return model
