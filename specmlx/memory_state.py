"""What a conversation holds beside the weights, read from a `config.json`'s shapes: the attention
layers' KV per position, a hybrid's recurrent state (its short convolution's window and its
recurrent state, per recurrent layer), what a round's rewind keeps (`caches/recurrent.py`, `caches/replay.py`),
and the KV of the checkpoint's own MTP layers.

Only the architectures read here get a figure; for any other `state_bytes` is 0 and
`memory.MARGIN` stands for it, as before. `tests/test_memory_state.py` checks each figure
against the arrays mlx-lm's own caches and a recorded forward allocate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

CONTEXT = 8192  # positions a local chat's cache is sized for in the estimate
NUM_DRAFT = 8  # drafted tokens a round, an upper bound for the rewind's record (k + 1 positions)
KEPT_FORWARDS = 2  # a rewind reaches into the last recorded forward and the one before it
STATE_BYTES = 4  # mlx-lm keeps the recurrent states (Gated DeltaNet's, Mamba-2's SSM) in float32


@dataclass(frozen=True)
class StateShapes:
    """Per row of a batch, in bytes: what one position of context costs (`kv_per_token`), the
    recurrent layers' whole state (`recurrent`), and what recording one position of a forward
    keeps for its replay (`record_per_token`)."""

    kv_per_token: int
    recurrent: int = 0
    record_per_token: int = 0
    mtp_kv_per_token: int = 0  # the checkpoint's own MTP layers, drafting with the target's hidden state


def state_bytes(config: dict, context: int = CONTEXT, num_draft: int = NUM_DRAFT, rows: int = 1) -> int:
    """What `rows` conversations of `context` positions hold beside the weights; 0 when the
    architecture is not one `shapes` reads."""
    s = shapes(config)
    if s is None:
        return 0
    # The marks of the last recorded forwards (a state and a record each) and the prompt's checkpoint.
    kept = KEPT_FORWARDS * (s.recurrent + s.record_per_token * (num_draft + 1)) + s.recurrent if s.recurrent else 0
    return rows * ((s.kv_per_token + s.mtp_kv_per_token) * context + s.recurrent + kept)


def shapes(config: dict) -> StateShapes | None:
    """The per-row figures of a `config.json` (Qwen3.5's settings under `text_config`), None for an
    architecture not read here."""
    read = _READERS.get(config.get("model_type", ""))
    if read is None:
        return None
    try:
        return read(config.get("text_config", config), _activation_bytes(config))
    except (KeyError, TypeError, ZeroDivisionError):  # a config mlx-lm cannot build either: its load says so
        return None


def _activation_bytes(config: dict) -> int:
    """The width of keys, values and activations: the checkpoint's float type (a quantized model
    computes in it too), float32 where none is named (specmlx's CPU conversions)."""
    text = config.get("text_config", {})
    named = [c.get(k) for c in (config, text) for k in ("torch_dtype", "dtype")]
    return 2 if any(n in ("float16", "bfloat16") for n in named) else 4


def _attention(c: dict, layers: int, act: int) -> int:
    """Keys and values of `layers` attention layers, a position."""
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return layers * 2 * c.get("num_key_value_heads", c["num_attention_heads"]) * head_dim * act


def _gated_deltanet(c: dict, act: int) -> StateShapes:
    """Qwen3.5, Qwen3.5-MoE, Qwen3-Next: every `full_attention_interval`-th layer attends, the others
    are Gated DeltaNet (mlx-lm's `is_linear`). The record keeps, a position, the mixer's input and
    what its sub-modules return: the q/k/v projection and its convolution, z, b, a, the gated norm
    and the output projection."""
    layers, interval = c["num_hidden_layers"], c.get("full_attention_interval", 4)
    attention = sum((i + 1) % interval == 0 for i in range(layers))
    linear = layers - attention
    kd = c["linear_num_key_heads"] * c["linear_key_head_dim"]
    hv, dv = c["linear_num_value_heads"], c["linear_value_head_dim"]
    conv = 2 * kd + hv * dv
    window = (c.get("linear_conv_kernel_dim", 4) - 1) * conv * act
    state = hv * dv * c["linear_key_head_dim"] * STATE_BYTES
    record = (2 * conv + 2 * hv * dv + 2 * hv + 2 * c["hidden_size"]) * act
    mtp = c.get("mtp_num_hidden_layers", c.get("num_nextn_predict_layers", 0)) or 0
    return StateShapes(_attention(c, attention, act), linear * (window + state), linear * record,
                       _mtp(c, mtp, act))


def _mamba2(c: dict, act: int, layers: int, heads: int, head_dim: int, groups: int, size: int, kernel: int) -> StateShapes:
    """`layers` Mamba-2 mixers: the window holds x, B and C; the record keeps the mixer's input, its
    input projection (x, z, B, C and dt), its convolution, the gated norm and the output projection;
    and the convolution's input, which the window left by a recorded forward (a view of it) keeps."""
    inner = heads * head_dim
    conv = inner + 2 * groups * size
    window = (kernel - 1) * conv * act
    state = heads * head_dim * size * STATE_BYTES
    record = (2 * inner + 3 * conv + heads + 2 * c["hidden_size"]) * act
    return StateShapes(0, layers * (window + state), layers * record)


def _nemotron_h(c: dict, act: int) -> StateShapes:
    """Nemotron-H: its `hybrid_override_pattern` names each block (M Mamba-2, * attention, - MLP, E
    MoE); its MTP blocks are `mtp_hybrid_override_pattern`'s."""
    pattern = "".join(c["hybrid_override_pattern"])
    m = _mamba2(c, act, pattern.count("M"), c["mamba_num_heads"], c["mamba_head_dim"], c["n_groups"],
                c["ssm_state_size"], c["conv_kernel"])
    mtp = "".join(c.get("mtp_hybrid_override_pattern", "")).count("*") if c.get("num_nextn_predict_layers") else 0
    return StateShapes(_attention(c, pattern.count("*"), act), m.recurrent, m.record_per_token, _mtp(c, mtp, act))


def _granite_hybrid(c: dict, act: int) -> StateShapes:
    """Granite 4 hybrids: `layer_types` names each layer, "mamba" or "attention"."""
    types = c["layer_types"]
    m = _mamba2(c, act, types.count("mamba"), c["mamba_n_heads"], c["mamba_d_head"], c["mamba_n_groups"],
                c["mamba_d_state"], c["mamba_d_conv"])
    return StateShapes(_attention(c, types.count("attention"), act), m.recurrent, m.record_per_token)


def _mamba2_only(c: dict, act: int) -> StateShapes:
    return _mamba2(c, act, c["num_hidden_layers"], c["num_heads"], c["head_dim"], c["n_groups"],
                   c["state_size"], c["conv_kernel"])


def _mtp(c: dict, attention_layers: int, act: int) -> int:
    """The MTP layers' KV a position, and the row of the target's hidden state they keep with it
    (`Drafter.bytes_per_token`)."""
    return _attention(c, attention_layers, act) + c["hidden_size"] * act if attention_layers else 0


_READERS: dict[str, Callable[[dict, int], StateShapes]] = {
    "qwen3_5": _gated_deltanet, "qwen3_5_moe": _gated_deltanet, "qwen3_next": _gated_deltanet,
    "nemotron_h": _nemotron_h, "granitemoehybrid": _granite_hybrid, "mamba2": _mamba2_only,
}
