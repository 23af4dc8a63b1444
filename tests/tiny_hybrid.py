"""Tiny random hybrid models (attention and recurrent layers) of mlx-lm's classes, with the real
configs' structure: Qwen3.5 and Qwen3-Next (three Gated DeltaNet layers to one attention layer,
more value heads than key heads, a 4-wide short convolution, partial rotary attention with a gate;
Qwen3.5's and Qwen3-Next's MoE with a shared expert), Nemotron-H (Mamba-2 mixers in grouped heads, MLP blocks
and an attention block in its `hybrid_override_pattern`, an untied head), and by the same mechanism
Granite 4 hybrids (Mamba-2 and attention), LFM2 (short gated convolutions and attention) and
Mamba-2 alone."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.models import granitemoehybrid, lfm2, mamba2, nemotron_h, qwen3_5, qwen3_5_moe, qwen3_next


def qwen3_5_config(vocab_size: int, layers: int = 4, head_dim: int = 16) -> dict:
    """Qwen3.5's `config.json` in miniature: its settings under `text_config`, as the checkpoints ship
    (`head_dim` of its attention layers: 32 for keys quantized by groups of 32)."""
    return {"model_type": "qwen3_5", "text_config": {
        "model_type": "qwen3_5_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": layers,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": head_dim, "rms_norm_eps": 1e-6,
        "vocab_size": vocab_size, "max_position_embeddings": 4096, "linear_num_value_heads": 4,
        "linear_num_key_heads": 2, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
        "linear_conv_kernel_dim": 4, "full_attention_interval": 4, "tie_word_embeddings": False,
        "rope_parameters": {"type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}}}


def qwen3_5_moe_config(vocab_size: int, layers: int = 4) -> dict:
    """Qwen3.5's MoE form: routed experts and a gated shared expert in every layer."""
    config = qwen3_5_config(vocab_size, layers)
    config["model_type"] = "qwen3_5_moe"
    config["text_config"].update(model_type="qwen3_5_moe_text", num_experts=4, num_experts_per_tok=2,
                                 moe_intermediate_size=32, shared_expert_intermediate_size=32)
    return config


def qwen3_next_args(vocab_size: int, layers: int = 4) -> qwen3_next.ModelArgs:
    return qwen3_next.ModelArgs(
        model_type="qwen3_next", hidden_size=64, num_hidden_layers=layers, intermediate_size=128,
        num_attention_heads=4, linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2,
        decoder_sparse_step=1, shared_expert_intermediate_size=32, mlp_only_layers=[], moe_intermediate_size=32,
        rms_norm_eps=1e-6, vocab_size=vocab_size, num_key_value_heads=2, rope_theta=10000.0,
        partial_rotary_factor=0.25, max_position_embeddings=4096, head_dim=16, full_attention_interval=4)


def nemotron_h_args(vocab_size: int, pattern: str = "M-M*M-") -> nemotron_h.ModelArgs:
    return nemotron_h.ModelArgs(
        model_type="nemotron_h", vocab_size=vocab_size, hidden_size=64, intermediate_size=128,
        max_position_embeddings=4096, num_attention_heads=4, num_key_value_heads=2, attention_bias=False,
        mamba_num_heads=8, mamba_head_dim=16, mamba_proj_bias=False, ssm_state_size=16, conv_kernel=4, n_groups=2,
        mlp_bias=False, layer_norm_epsilon=1e-5, use_bias=False, use_conv_bias=True,
        hybrid_override_pattern=list(pattern), head_dim=16)


def granite_hybrid_args(vocab_size: int) -> granitemoehybrid.ModelArgs:
    return granitemoehybrid.ModelArgs(
        model_type="granitemoehybrid", vocab_size=vocab_size, hidden_size=64, intermediate_size=128,
        num_hidden_layers=4, max_position_embeddings=4096, num_attention_heads=4, num_key_value_heads=2,
        attention_bias=False, embedding_multiplier=12.0, attention_multiplier=0.25, logits_scaling=4.0,
        residual_multiplier=0.25, layer_types=["mamba", "mamba", "attention", "mamba"], rms_norm_eps=1e-5,
        mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=2, mamba_d_state=16, mamba_d_conv=4,
        mamba_conv_bias=True, mamba_proj_bias=False, tie_word_embeddings=False)


def lfm2_args(vocab_size: int) -> lfm2.ModelArgs:
    return lfm2.ModelArgs(
        model_type="lfm2", vocab_size=vocab_size, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096, norm_eps=1e-5, conv_bias=False, conv_L_cache=3,
        block_dim=64, block_multiple_of=16, block_ffn_dim_multiplier=1.0, block_auto_adjust_ff_dim=False,
        full_attn_idxs=[2], block_ff_dim=128)


def mamba2_args(vocab_size: int) -> mamba2.ModelArgs:
    return mamba2.ModelArgs(
        model_type="mamba2", num_heads=8, head_dim=16, vocab_size=vocab_size, hidden_size=64, intermediate_size=128,
        state_size=16, num_hidden_layers=3, layer_norm_epsilon=1e-5, conv_kernel=4, n_groups=2, use_bias=False,
        use_conv_bias=True, tie_word_embeddings=False, time_step_limit=(0.0, float("inf")), time_step_rank="auto")


def sharpened(model: nn.Module, sharpness: float = 4.0) -> nn.Module:
    """Embeddings and head scaled so next-token distributions are peaked like a trained model's."""
    scaled = {k: v * sharpness for k, v in tree_flatten(model.parameters()) if any(n in k for n in ("embed_tokens", "embeddings", "lm_head"))}
    model.load_weights(list(scaled.items()), strict=False)
    mx.eval(model.parameters())
    return model


def tiny_qwen3_5(vocab_size: int, seed: int, layers: int = 4, head_dim: int = 16) -> nn.Module:
    mx.random.seed(seed)
    return sharpened(qwen3_5.Model(qwen3_5.ModelArgs.from_dict(qwen3_5_config(vocab_size, layers, head_dim))))


def tiny_qwen3_5_moe(vocab_size: int, seed: int, layers: int = 4) -> nn.Module:
    mx.random.seed(seed)
    return sharpened(qwen3_5_moe.Model(qwen3_5_moe.ModelArgs.from_dict(qwen3_5_moe_config(vocab_size, layers))))


def tiny_qwen3_next(vocab_size: int, seed: int, layers: int = 4) -> nn.Module:
    mx.random.seed(seed)
    return sharpened(qwen3_next.Model(qwen3_next_args(vocab_size, layers)))


def tiny_nemotron_h(vocab_size: int, seed: int) -> nn.Module:
    mx.random.seed(seed)
    return sharpened(nemotron_h.Model(nemotron_h_args(vocab_size)))


def tiny_granite_hybrid(vocab_size: int, seed: int) -> nn.Module:
    mx.random.seed(seed)
    return sharpened(granitemoehybrid.Model(granite_hybrid_args(vocab_size)))


def tiny_lfm2(vocab_size: int, seed: int) -> nn.Module:
    """Its head is its embedding table: its blocks' output projections are scaled up so that the last
    token's own embedding does not decide every next token."""
    mx.random.seed(seed)
    model = lfm2.Model(lfm2_args(vocab_size))
    model.load_weights([(k, 3 * v) for k, v in tree_flatten(model.parameters())
                        if k.endswith("proj.weight") or ".w2." in k], strict=False)
    return sharpened(model)


def tiny_mamba2(vocab_size: int, seed: int) -> nn.Module:
    mx.random.seed(seed)
    return sharpened(mamba2.Model(mamba2_args(vocab_size)))


def save_qwen3_5(model: nn.Module, vocab_size: int, tokenizer, path, mtp: nn.Module | None = None):
    """An mlx-lm model directory of a tiny Qwen3.5, its config as the checkpoints write it; with
    `mtp`, its MTP layers too, under `mtp.` as an MLX conversion that kept them holds them."""
    import json

    path.mkdir(parents=True, exist_ok=True)
    weights = dict(tree_flatten(model.parameters()))
    config = qwen3_5_config(vocab_size, len(model.layers))
    if mtp is not None:
        weights.update({f"mtp.{k}": v for k, v in tree_flatten(mtp.parameters())})
        config["text_config"]["mtp_num_hidden_layers"] = len(mtp.layers)
    mx.save_safetensors(str(path / "model.safetensors"), weights)
    (path / "config.json").write_text(json.dumps(config))
    tokenizer.save_pretrained(str(path))
    return path


MTP_NORMS = ("norm.weight", "norm_embedding.weight", "norm_hidden.weight")  # every RMSNorm of the MTP layers


def spread_norms(model: nn.Module, suffixes: tuple[str, ...]) -> None:
    """The weights of the norms named by `suffixes` spread around 1, so a norm left out or shifted twice shows."""
    model.load_weights([(k, 1.0 + 0.3 * mx.random.normal(v.shape)) for k, v in tree_flatten(model.parameters())
                        if k.endswith(suffixes)], strict=False)


def tiny_native_mtp(target: nn.Module, seed: int, layers: int = 1, guesses: bool = False):
    """Random Qwen3.5 MTP layers of the target's own layout (`specmlx.models.qwen3_5_mtp`), its norms'
    weights spread around 1 so that a norm left out or shifted twice shows. `guesses`: `fc` passes
    the token's embedding through and its final norm is the target's, so that, the sharpened
    target's next token following mostly from its last, about a quarter of its drafts are accepted."""
    from specmlx.hidden import inner_model, text_model
    from specmlx.models.qwen3_5_mtp import Qwen3_5MTP

    mx.random.seed(seed)
    model = Qwen3_5MTP(text_model(target).args, layers)
    spread_norms(model, MTP_NORMS)
    if guesses:
        width = model.fc.weight.shape[0]
        fc = mx.concatenate([mx.eye(width), 0.3 * model.fc.weight[:, width:]], axis=1)
        model.load_weights([("fc.weight", fc), ("norm.weight", inner_model(target).norm.weight)], strict=False)
    mx.eval(model.parameters())
    return model


_HF_NORMS = (".input_layernorm.weight", ".post_attention_layernorm.weight", "model.norm.weight", ".q_norm.weight",
             ".k_norm.weight", "pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight", "mtp.norm.weight")


def save_qwen3_5_hf(model: nn.Module, mtp: nn.Module, vocab_size: int, tokenizer, path):
    """A tiny Qwen3.5 with its MTP layers as Hugging Face's checkpoints hold them: `model.language_model.`
    names, zero-centred norms (weight - 1), the short convolution's kernel last, `mtp.*` beside."""
    import json

    path.mkdir(parents=True, exist_ok=True)
    weights = {}
    named = [(k.replace("language_model.model.", "model.language_model.").replace("language_model.lm_head", "lm_head"), v)
             for k, v in tree_flatten(model.parameters())] + [(f"mtp.{k}", v) for k, v in tree_flatten(mtp.parameters())]
    for k, v in named:
        if "conv1d.weight" in k:
            v = v.moveaxis(2, 1)
        weights[k] = v - 1.0 if k.endswith(_HF_NORMS) and v.ndim == 1 else v
    config = qwen3_5_config(vocab_size, len(model.layers))
    config["text_config"]["mtp_num_hidden_layers"] = len(mtp.layers)
    mx.save_safetensors(str(path / "model.safetensors"), weights)
    (path / "config.json").write_text(json.dumps(config))
    tokenizer.save_pretrained(str(path))
    return path


NEMOTRON_MTP_PATTERN = "*E"  # the MTP block Nemotron 3 checkpoints declare: attention, then MoE


def nemotron_h_moe_config(vocab_size: int) -> dict:
    """Nemotron-H with a MoE block in its pattern and an MTP block (`mtp_hybrid_override_pattern`)."""
    import dataclasses

    config = dataclasses.asdict(nemotron_h_args(vocab_size, "M-M*ME"))
    config.update(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
                  moe_shared_expert_intermediate_size=32, n_group=1, topk_group=1, norm_topk_prob=True,
                  routed_scaling_factor=1.0, num_nextn_predict_layers=1,
                  mtp_hybrid_override_pattern=NEMOTRON_MTP_PATTERN)
    return {k: v for k, v in config.items() if v is not None and k != "num_hidden_layers"}  # as a config.json has it


def tiny_nemotron_h_moe(vocab_size: int, seed: int) -> nn.Module:
    mx.random.seed(seed)
    return sharpened(nemotron_h.Model(nemotron_h.ModelArgs.from_dict(nemotron_h_moe_config(vocab_size))))


def tiny_nemotron_h_mtp(target: nn.Module, seed: int, guesses: bool = False):
    """Random Nemotron-H MTP blocks of the target's layout, norms spread around 1; `guesses` as for
    `tiny_native_mtp`, the blocks' outputs scaled down so that the token's embedding carries through."""
    from specmlx.hidden import inner_model
    from specmlx.models.nemotron_h_mtp import NemotronHMTP

    mx.random.seed(seed)
    model = NemotronHMTP(target.args, NEMOTRON_MTP_PATTERN)
    spread_norms(model, ("norm.weight", "layernorm.weight"))
    if guesses:
        width = model.layers[0].eh_proj.weight.shape[0]
        proj = mx.concatenate([mx.eye(width), 0.3 * model.layers[0].eh_proj.weight[:, width:]], axis=1)
        quiet = [(k, 0.1 * v) for k, v in tree_flatten(model.parameters()) if k.endswith(("o_proj.weight", "fc2.weight",
                                                                                          "down_proj.weight"))]
        model.load_weights([("layers.0.eh_proj.weight", proj), *quiet,
                            ("layers.1.final_layernorm.weight", inner_model(target).norm_f.weight)], strict=False)
    mx.eval(model.parameters())
    return model


def deepseek_v3_config(vocab_size: int) -> dict:
    """DeepSeek-V3 in miniature (MLA attention, a dense first layer then MoE with a shared expert,
    sigmoid routing) with its MTP layer declared (`num_nextn_predict_layers`)."""
    return {"model_type": "deepseek_v3", "vocab_size": vocab_size, "hidden_size": 64, "intermediate_size": 128,
            "moe_intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
            "n_shared_experts": 1, "n_routed_experts": 4, "num_experts_per_tok": 2, "kv_lora_rank": 16,
            "q_lora_rank": 32, "qk_rope_head_dim": 8, "v_head_dim": 16, "qk_nope_head_dim": 16,
            "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1, "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "num_nextn_predict_layers": 1}


def tiny_deepseek_v3(vocab_size: int, seed: int) -> nn.Module:
    from mlx_lm.models import deepseek_v3

    mx.random.seed(seed)
    return sharpened(deepseek_v3.Model(deepseek_v3.ModelArgs.from_dict(deepseek_v3_config(vocab_size))))


def glm4_moe_config(vocab_size: int) -> dict:
    """GLM-4.5 in miniature (grouped-query attention with partial rotary and QK norm, a dense first
    layer then MoE with a shared expert) with its MTP layer declared."""
    return {"model_type": "glm4_moe", "vocab_size": vocab_size, "hidden_size": 64, "intermediate_size": 128,
            "max_position_embeddings": 4096, "moe_intermediate_size": 32, "norm_topk_prob": True,
            "num_attention_heads": 4, "n_group": 1, "head_dim": 16, "topk_group": 1, "n_shared_experts": 1,
            "n_routed_experts": 4, "routed_scaling_factor": 1.0, "num_experts_per_tok": 2, "first_k_dense_replace": 1,
            "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "rope_scaling": None, "use_qk_norm": True, "tie_word_embeddings": False, "attention_bias": False,
            "partial_rotary_factor": 0.5, "num_nextn_predict_layers": 1}


def tiny_glm4_moe(vocab_size: int, seed: int) -> nn.Module:
    from mlx_lm.models import glm4_moe

    mx.random.seed(seed)
    return sharpened(glm4_moe.Model(glm4_moe.ModelArgs.from_dict(glm4_moe_config(vocab_size))))


def glm4_moe_lite_config(vocab_size: int) -> dict:
    """GLM-4.7-Flash in miniature (MLA attention, a dense first layer then MoE with a shared expert,
    sigmoid routing scaled) with its MTP layer declared."""
    return {**deepseek_v3_config(vocab_size), "model_type": "glm4_moe_lite", "routed_scaling_factor": 1.8,
            "rms_norm_eps": 1e-5, "tie_word_embeddings": False}


def tiny_glm4_moe_lite(vocab_size: int, seed: int) -> nn.Module:
    from mlx_lm.models import glm4_moe_lite

    mx.random.seed(seed)
    return sharpened(glm4_moe_lite.Model(glm4_moe_lite.ModelArgs.from_dict(glm4_moe_lite_config(vocab_size))))


def tiny_deepseek_v3_mtp(target: nn.Module, seed: int, guesses: bool = False):
    """A random DeepSeek-V3-style MTP layer of the target's layout (DeepSeek-V3, GLM-4.5 or GLM-4.7-Flash), norms
    spread around 1; `guesses`: `eh_proj`
    passes the token's embedding through, the block's outputs are scaled down and its shared head is
    the target's (norm and head), so that some drafts are accepted."""
    from specmlx.models.deepseek_v3_mtp import DeepseekV3MTP

    mx.random.seed(seed)
    model = DeepseekV3MTP(target.args)
    spread_norms(model, ("norm.weight",))
    if guesses:
        width = model.eh_proj.weight.shape[0]
        proj = mx.concatenate([mx.eye(width), 0.3 * model.eh_proj.weight[:, width:]], axis=1)
        quiet = [(k, 0.1 * v) for k, v in tree_flatten(model.parameters())
                 if k.endswith(("o_proj.weight", "down_proj.weight"))]
        model.load_weights([("eh_proj.weight", proj), *quiet, ("shared_head.norm.weight", target.model.norm.weight),
                            ("shared_head.head.weight", target.lm_head.weight)], strict=False)
    mx.eval(model.parameters())
    return model


def mimo_config(vocab_size: int) -> dict:
    """MiMo in miniature (Qwen2's blocks) with one MTP layer declared."""
    return {"model_type": "mimo", "vocab_size": vocab_size, "hidden_size": 64, "num_hidden_layers": 2,
            "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
            "max_position_embeddings": 4096, "tie_word_embeddings": False, "num_nextn_predict_layers": 1}


def tiny_mimo(vocab_size: int, seed: int) -> nn.Module:
    from mlx_lm.models import mimo

    mx.random.seed(seed)
    return sharpened(mimo.Model(mimo.ModelArgs.from_dict(mimo_config(vocab_size))))


def tiny_mimo_mtp(target: nn.Module, seed: int, guesses: bool = False):
    """A random MiMo MTP layer of the target's layout, norms spread around 1; `guesses` as for
    `tiny_deepseek_v3_mtp` (its projection reads the hidden state first, then the token)."""
    from specmlx.models.mimo_mtp import MiMoMTP

    mx.random.seed(seed)
    model = MiMoMTP(target.args)
    spread_norms(model, ("norm.weight",))
    if guesses:
        width = model.input_proj.weight.shape[0]
        proj = mx.concatenate([0.3 * model.input_proj.weight[:, :width], mx.eye(width)], axis=1)
        quiet = [(k, 0.1 * v) for k, v in tree_flatten(model.parameters())
                 if k.endswith(("o_proj.weight", "down_proj.weight"))]
        model.load_weights([("input_proj.weight", proj), *quiet, ("final_layernorm.weight", target.model.norm.weight)],
                           strict=False)
    mx.eval(model.parameters())
    return model
