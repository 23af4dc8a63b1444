"""What rewinding a hybrid's recurrent layers costs a round: `python -m specmlx.bench.rewind`.

Random models built by mlx-lm's own classes with a checkpoint's layer pattern and its recurrent
layers' real state shapes (heads, head widths, state size, convolution), the rest narrowed to
`--hidden` so that the weights fit here. After a prompt, each round runs a verify forward of k + 1
positions recorded as a round records it (`replay.recording`), rewinds to an accepted length
(1 .. k in turn: every one replays), and back. Per round it prints, medians over the rounds:
- the forward, unrecorded (mlx-lm's own cache, restored after each) and recorded, synced;
- the rewind's host time (building the lazy replay) and the replay's device time, evaluated
  apart here (in a round it joins the next round's graph);
- what the record holds a position (active memory, recorded forward less the unrecorded one, at
  two widths), the state a rewind keeps (one per recurrent layer), and what else a recorded
  forward keeps alive whatever its width.
Plain and recorded forwards alternate round by round, so drift on a noisy machine hits both.
"""

from __future__ import annotations

import argparse
import gc
import statistics
from dataclasses import dataclass
from time import perf_counter
from typing import Any, Callable

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import nemotron_h, qwen3_5
from mlx_lm.models.cache import make_prompt_cache

from .ragged import measure as batch_measure
from ..caches.stream import make_cache, prefill, recurrent_bytes
from ..caches.recurrent import mlx_lm_state
from ..caches.replay import recording

VOCAB = 4096  # the head's width does not change what the recurrent layers cost


def qwen3_5_9b(hidden: int, layers: int = 32) -> nn.Module:
    """Qwen3.5-9B's text layers: 32, a full-attention layer every 4th; Gated DeltaNet of 16 key
    and 32 value heads of 128, a 4-wide convolution; attention 16 heads (4 KV) of 256."""
    text = {"model_type": "qwen3_5_text", "hidden_size": hidden, "intermediate_size": 3 * hidden,
            "num_hidden_layers": layers, "full_attention_interval": 4, "num_attention_heads": 16,
            "num_key_value_heads": 4, "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
            "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
            "rms_norm_eps": 1e-6, "vocab_size": VOCAB, "max_position_embeddings": 4096, "tie_word_embeddings": False,
            "rope_parameters": {"type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25}}
    return qwen3_5.Model(qwen3_5.ModelArgs.from_dict({"model_type": "qwen3_5", "text_config": text}))


NEMOTRON_H_8B = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"


def nemotron_h_8b(hidden: int) -> nn.Module:
    """Nemotron-H-8B's 52 blocks (24 Mamba-2, 24 MLP, 4 attention): Mamba-2 of 128 heads of 64,
    state 128, 8 groups, a 4-wide convolution; attention 32 heads (8 KV) of 128."""
    return nemotron_h.Model(nemotron_h.ModelArgs(
        model_type="nemotron_h", vocab_size=VOCAB, hidden_size=hidden, intermediate_size=3 * hidden,
        max_position_embeddings=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        attention_bias=False, mamba_num_heads=128, mamba_head_dim=64, mamba_proj_bias=False, ssm_state_size=128,
        conv_kernel=4, n_groups=8, mlp_bias=False, layer_norm_epsilon=1e-5, use_bias=False, use_conv_bias=True,
        hybrid_override_pattern=list(NEMOTRON_H_8B)))


MODELS: dict[str, Callable[[int], nn.Module]] = {"qwen3_5-9b": qwen3_5_9b, "nemotron_h-8b": nemotron_h_8b}


@dataclass(frozen=True)
class Costs:
    """Medians a round, in ms, and memory in bytes."""

    plain_ms: float
    recorded_ms: float
    rewind_ms: float
    replay_ms: float
    record_per_position: int
    kept_state: int  # one state per recurrent layer: the mark a rewind restores
    kept_else: int  # what else a recorded forward keeps alive, whatever its width


def _timed(work: Callable[[], Any]) -> float:
    start = perf_counter()
    mx.eval(work())
    return (perf_counter() - start) * 1e3


def _restorer(cache: list[Any], width: int) -> Callable[[], None]:
    """Puts mlx-lm's own cache back where it is now after each forward of `width` positions."""
    states = [mlx_lm_state(c) for c in cache]

    def restore() -> None:
        for layer, state in zip(cache, states):
            if state is None:
                layer.trim(width)
            else:
                layer.cache = list(state)
    return restore


def record_bytes(model: nn.Module, tokens: list[int], block: mx.array) -> int:
    """What recording a forward of `block` holds beyond the state its mark keeps: the active memory a
    recorded forward leaves, less an unrecorded one's into the same kind of cache (whose state before
    it is let go), less one state.
    Part of it grows with the forward's width (the record), part does not (`measure` tells them apart)."""
    grown = []
    mx.eval(model.parameters())
    for cache, record in ((make_cache(model), False), (make_cache(model), True)):
        prefill(model, cache, tokens)
        mx.eval([c.state for c in cache])
        gc.collect()  # a recorded forward's closures make cycles: collected here, not inside a measurement
        before = mx.get_active_memory()
        if record:
            with recording(model, cache):
                _timed(lambda: (model(block, cache=cache), [c.state for c in cache]))
        else:
            _timed(lambda: (model(block, cache=cache), [c.state for c in cache]))
        grown.append(mx.get_active_memory() - before)
        del cache
    return grown[1] - grown[0] - recurrent_bytes(model)


def measure(model: nn.Module, k: int, rounds: int, prompt: int = 64) -> Costs:
    tokens = [1 + (7 * i) % (VOCAB - 1) for i in range(prompt)]
    block = mx.array([tokens[-k - 1:]], dtype=mx.uint32)
    one, record = (record_bytes(model, tokens, block[:, -n:]) for n in (1, k + 1))
    per_position = (record - one) // k
    plain, ours = make_prompt_cache(model), make_cache(model)
    prefill(model, plain, tokens)
    prefill(model, ours, tokens)
    restore, base = _restorer(plain, k + 1), ours.length
    rows: list[tuple[float, ...]] = []
    for i in range(rounds + 1):  # the first round warms up
        plain_ms = _timed(lambda: model(block, cache=plain))
        restore()
        with recording(model, ours):
            recorded_ms = _timed(lambda: (model(block, cache=ours), [c.state for c in ours]))
        start = perf_counter()
        ours.rewind(base + 1 + i % k)
        rewind_ms = (perf_counter() - start) * 1e3
        replay_ms = _timed(lambda: [c.state for c in ours])
        ours.rewind(base)
        rows.append((plain_ms, recorded_ms, rewind_ms, replay_ms))
    medians = [statistics.median(column) for column in zip(*rows[1:])]
    return Costs(*medians, per_position, recurrent_bytes(model), one - per_position)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m specmlx.bench.rewind", description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"of {', '.join(MODELS)}")
    parser.add_argument("--hidden", type=int, default=1024, help="the hidden width the weights are narrowed to")
    parser.add_argument("--k", type=int, default=4, help="drafted tokens a round (the forward scores k + 1)")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--rows", type=int, default=0,
                        help="also a batch of this many rows, each keeping its own count (specmlx.bench.ragged)")
    args = parser.parse_args(argv)
    print(f"k={args.k}, hidden {args.hidden}, float32, {args.rounds} rounds; medians a round")
    print(f"{'model':<15}{'forward ms':>11}{'recorded':>10}{'rewind ms':>11}{'replay ms':>11}"
          f"{'replay/fwd':>11}{'record KB/pos':>15}{'state MB':>10}{'else MB':>9}")
    for name in args.models.split(","):
        mx.random.seed(0)
        model = MODELS[name](args.hidden)
        mx.eval(model.parameters())
        c = measure(model, args.k, args.rounds)
        print(f"{name:<15}{c.plain_ms:>11.1f}{c.recorded_ms:>10.1f}{c.rewind_ms:>11.2f}{c.replay_ms:>11.2f}"
              f"{c.replay_ms / c.plain_ms:>10.1%}{c.record_per_position / 1024:>15.0f}{c.kept_state / 2**20:>10.1f}"
              f"{c.kept_else / 2**20:>9.1f}")
        if args.rows:
            forward, ragged = batch_measure(model, args.rows, 64, args.k + 1, args.rounds)
            print(f"{'':<15}{args.rows} rows: verify forward {forward * 1e3:.1f} ms, the rows' own rewinds "
                  f"(roll and replay) {ragged * 1e3:.1f} ms ({ragged / forward:.1%})")
        del model
        mx.clear_cache()


if __name__ == "__main__":
    main()
