"""What a block drafter's round costs at Qwen3.5's layer counts: `python -m specmlx.bench.block`.

A skeleton of Qwen3.5-4B and -9B as their DFlash drafters read them (real layer count, layer pattern,
vocabulary and block; tiny widths, random weights; float32), as `specmlx bench --skeleton` builds its
models: a step then costs mostly its per-operation overhead, as a 4-bit step does on an Apple GPU.
Both targets have 32 layers, 24 Gated DeltaNet and 8 attention (presets.toml), so at skeleton widths
one skeleton stands for both. Their DFlash drafters have 5 layers that read layers [1, 8, 15, 22, 29]
and draft blocks of 16 (z-lab's and its fine-tunes' cards); their own MTP layer is one decoder layer.
Timed at a 512-token context, interleaved and repeated, medians printed:

- the target's verify forward by rows, 1 to 17 (a round scores its last token and k drafts);
- the block drafter's draft of k (one forward, whatever k up to 15), against the MTP layer's (k steps),
  each through the drafter's own `draft`, its head and its argmax included;
- a whole round of the engine at k = 4, 8 and 15, against its two forwards timed apart: the rest is
  the host's work.

It ends with the speed-up a round of k would give at an acceptance per position `--accept`: a
prediction from these costs, not a measurement (acceptance on real weights cannot be had here).
"""

from __future__ import annotations

import argparse
import statistics
from time import perf_counter
from typing import Callable, Sequence

import mlx.core as mx
from mlx_lm.models import qwen3_5

from ..caches.stream import make_cache
from ..drafters.block import BlockDrafter
from ..drafters.native_mtp import NativeMTPDrafter
from ..engine import Engine, GenerationConfig
from ..hidden import decoder_taps
from ..models.dflash import BlockConfig, BlockModel
from ..models.qwen3_5_mtp import Qwen3_5MTP
from ..policy import DraftPolicy
from ..sampling import SamplingParams
from ..schedule.acceptance import expected_tokens
from .skeleton import HEAD_DIM, randomize

VOCAB = 248_320  # Qwen3.5's (padded) vocabulary
LAYERS, TAPPED, BLOCK, DRAFTER_LAYERS, HEADS = 32, (1, 8, 15, 22, 29), 16, 5, 16
CONTEXT = 512
ROWS = tuple(range(1, 18))
KS = (1, 2, 4, 8, 12, 15)  # a block drafter's widths (`schedule/widths.py`), 15 its whole block
GREEDY = SamplingParams()
# Public deployment notes report 5 to 7 tokens a round for z-lab's drafters verified whole (6.32 at
# k = 15 for Qwen3.6-35B-A3B's on vLLM, a DGX Spark): 0.855 a position gives 6.3 at k = 15.
ANCHOR = 0.855
ANCHORED = "a block of 16 then commits 6.3 tokens a round, as reported for z-lab's drafters"


def target_config() -> dict:
    hidden = HEADS * HEAD_DIM
    return {"model_type": "qwen3_5", "text_config": {
        "model_type": "qwen3_5_text", "hidden_size": hidden, "intermediate_size": 4 * hidden,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": 4, "head_dim": HEAD_DIM,
        "rms_norm_eps": 1e-6, "vocab_size": VOCAB, "max_position_embeddings": 262_144,
        "linear_num_value_heads": 2 * HEADS, "linear_num_key_heads": HEADS, "linear_key_head_dim": HEAD_DIM,
        "linear_value_head_dim": HEAD_DIM, "linear_conv_kernel_dim": 4, "full_attention_interval": 4,
        "tie_word_embeddings": False,
        "rope_parameters": {"type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25}}}


def drafter_config() -> BlockConfig:
    hidden = HEADS * HEAD_DIM
    return BlockConfig(hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=DRAFTER_LAYERS,
                       num_attention_heads=HEADS, num_key_value_heads=4, head_dim=HEAD_DIM, vocab_size=VOCAB,
                       target_layer_ids=TAPPED, mask_token_id=VOCAB - 250, block_size=BLOCK, num_target_layers=LAYERS)


def timed(run: Callable[[], object]) -> float:
    start = perf_counter()
    mx.eval(run())
    return perf_counter() - start


def ms(samples: list[float]) -> float:
    return 1000 * statistics.median(samples)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specmlx.bench.block", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7, help="timings of each, medians printed (default 7)")
    parser.add_argument("--accept", type=float, default=ANCHOR,
                        help=f"acceptance a position for the predicted speed-ups (default {ANCHOR}: {ANCHORED})")
    args = parser.parse_args(argv)

    target = qwen3_5.Model(qwen3_5.ModelArgs.from_dict(target_config()))
    randomize(target, seed=1)
    block, mtp = BlockModel(drafter_config()), Qwen3_5MTP(target.language_model.args, 1)
    randomize(block, seed=2)
    randomize(mtp, seed=3)
    prompt = [(7 * i + 3) % 50_000 for i in range(CONTEXT)]
    cache = make_cache(target)
    hidden, taps = decoder_taps(target, mx.array([prompt[:-1]]), cache, tuple(i + 1 for i in TAPPED))
    mx.eval(hidden, taps, [c.state for c in cache])
    drafters = {"block": BlockDrafter(block, VOCAB, "dflash"), "mtp": NativeMTPDrafter(mtp, VOCAB)}
    for drafter in drafters.values():
        drafter.attach(target, cache)
        drafter.observe(0, hidden[0], taps[0])
    key = mx.random.key(0)

    def verify(rows: int) -> Callable[[], object]:
        def run():
            out = target(mx.array([prompt[-rows:]]), cache=cache)
            mx.eval(out)
            cache.rewind(CONTEXT - 1)  # back to before it: a recurrent layer to the mark the forward left
            return out
        return run

    def draft(name: str, k: int) -> Callable[[], object]:
        def run():
            tokens = drafters[name].draft(prompt, k, GREEDY, key).tokens
            mx.eval(tokens)
            drafters[name].rewind(CONTEXT)
            return tokens
        return run

    verify_s = {rows: [] for rows in ROWS}
    draft_s = {(name, k): [] for name in drafters for k in KS}
    for _ in range(args.repeats):  # interleaved, so that drift hits every figure alike
        for rows in ROWS:
            verify_s[rows].append(timed(verify(rows)))
        for name, k in draft_s:
            draft_s[name, k].append(timed(draft(name, k)))
    step = ms(verify_s[1])
    print(f"skeleton: {LAYERS} layers ({HEADS} heads of {HEAD_DIM}, vocabulary {VOCAB:,}); block drafter "
          f"{DRAFTER_LAYERS} layers, block {BLOCK}; context {CONTEXT}; medians of {args.repeats}; "
          f"in target steps ({step:.1f} ms)")
    print("verify by rows: " + ", ".join(f"{rows}: {ms(verify_s[rows]) / step:.2f}" for rows in ROWS))
    for name in drafters:
        print(f"{name} draft of k: " + ", ".join(f"{k}: {ms(draft_s[name, k]) / step:.2f}" for k in KS))
    print(f"PREDICTED, not measured, at acceptance {args.accept} a position (tokens a round / its cost in "
          "target steps, this machine's costs):")
    for k in KS:
        tokens = expected_tokens([args.accept] * k, k)
        costs = {name: ms(draft_s[name, k]) / step + ms(verify_s[k + 1]) / step for name in drafters}
        print(f"  k={k:2d}: {tokens:.2f} tokens; " + ", ".join(
            f"{name} {costs[name]:.2f} steps, {tokens / costs[name]:.2f}x" for name in drafters))
    engine = Engine(target, BlockDrafter(block, VOCAB, "dflash"), eos_token_ids=[])
    for k in (4, 8, 15):
        generation = engine.generate(prompt, GenerationConfig(max_tokens=32, policy=DraftPolicy(num_draft=k)))
        list(generation)
        stats = generation.stats
        apart, round_ms = ms(draft_s["block", k]) + ms(verify_s[k + 1]), 1000 * stats.decode_s / stats.rounds
        print(f"engine at k={k}: {round_ms:.1f} ms a round, its two forwards timed apart {apart:.1f} ms: "
              f"the rest {100 * (round_ms / apart - 1):.0f}% of them")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
