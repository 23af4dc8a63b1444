"""What `--kv-bits` saves and costs: `python -m specmlx.bench.kv`.

For each context length (`--contexts`, 4K and 16K by default) the target holds a prompt of that many
tokens (specmlx's own source, tokenized, as an agent's files are), then answers `--tokens` more greedily,
drafted (`--drafter`, prompt lookup by default: it copies from the source it read). Its keys and values
are kept as the weights are, at 8 bits and at 4 (`--group-size` values a scale and a bias), the three
interleaved for each context, each on a fresh engine. Printed a row each: the cache's bytes a position
(from its arrays), what it holds after the prompt, the prompt's prefill time and the answer's tokens a
second, and whether the answer is the unquantized one's. `--skeleton HEAD_DIM` builds the target at its
real layers and heads with heads of HEAD_DIM (64 by default: a group must fit a head), random weights:
the users' regime of steps of milliseconds on this CPU.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from time import perf_counter

import mlx.core as mx

from ..blas import describe, ensure_fast_blas
from ..caches.kinds import KVBits
from ..kv_flags import KV_GROUP
from ..cli import run_cli
from ..engine import Engine, GenerationConfig
from ..loading import ONE_PROCESS, load_models
from ..policy import DraftPolicy
from ..presets import default_preset_name
from .skeleton import Skeleton, skeleton_specs

SOURCE = Path(__file__).resolve().parents[1]  # specmlx's own files: a long context of real code


def context(tokenizer, length: int) -> list[int]:
    """`length` tokens of specmlx's source, its files one after another (again from the first if short)."""
    text = "\n\n".join(p.read_text() for p in sorted(SOURCE.rglob("*.py")))[: 8 * length]  # ample: ~4 a token
    tokens = tokenizer.encode(text)
    while len(tokens) < length:
        tokens = tokens + tokens
    return tokens[:length]


def run(model, drafter, tokenizer, prompt: list[int], kv: KVBits | None, tokens: int, num_draft: int) -> dict:
    engine = Engine(model, drafter.fresh(), tokenizer, eos_token_ids=(), kv=kv)
    start = perf_counter()
    engine.prefill(prompt)
    prefill_s = perf_counter() - start
    held = engine.cache.held_bytes()
    answer = engine.generate(prompt, GenerationConfig(max_tokens=tokens, policy=DraftPolicy(num_draft=num_draft)))
    out = [e.token for e in answer.token_events()]
    return {"per_position": engine.cache.per_position(), "held": held, "prefill_s": prefill_s,
            "tps": answer.stats.generation_tps, "tokens": out}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specmlx.bench.kv", description=__doc__.splitlines()[0])
    parser.add_argument("--target", default=None, help="a preset or model directory (default: the default preset)")
    parser.add_argument("--drafter", default="ngram", help="drafter spec (default ngram)")
    parser.add_argument("--num-draft", type=int, default=4)
    parser.add_argument("--contexts", default="4096,16384", help="prompt lengths, comma-separated")
    parser.add_argument("--tokens", type=int, default=32, help="answer tokens a run")
    parser.add_argument("--group-size", type=int, default=KV_GROUP)
    parser.add_argument("--skeleton", type=int, nargs="?", const=64, default=None, metavar="HEAD_DIM")
    args = parser.parse_args(argv)
    return run_cli("python -m specmlx.bench.kv", lambda: measure(args))


def measure(args: argparse.Namespace) -> int:
    target = args.target or default_preset_name()
    specs = [args.drafter]
    placement = ONE_PROCESS
    if args.skeleton is not None:
        specs, placement = skeleton_specs(target, specs), Skeleton(args.skeleton)
    loaded = load_models(target, specs, placement=placement)
    model, tokenizer, drafter = loaded.target.model, loaded.target.tokenizer, loaded.drafters[0]
    settings = [None, KVBits(8, args.group_size), KVBits(4, args.group_size)]
    print(f"target {loaded.target.name}{' (skeleton)' if args.skeleton else ''}, drafter {drafter.name} k={args.num_draft}, "
          f"{args.tokens} tokens a run ({mx.default_device()}, {describe()})")
    print(f"{'context':>8} {'kv':>10} {'bytes/pos':>10} {'held MB':>9} {'prefill s':>10} {'tok/s':>7} {'= none':>7}")
    for length in (int(n) for n in args.contexts.split(",")):
        prompt = context(tokenizer, length)
        wide = None
        for kv in settings:
            row = run(model, drafter, tokenizer, prompt, kv, args.tokens, args.num_draft)
            wide = row["tokens"] if kv is None else wide
            name = "as weights" if kv is None else f"{kv.bits}-bit g{kv.group_size}"
            print(f"{length:>8} {name:>10} {row['per_position']:>10} {row['held'] / 1e6:>9.1f} {row['prefill_s']:>10.2f} "
                  f"{row['tps']:>7.2f} {str(row['tokens'] == wide):>7}", flush=True)
    return 0


if __name__ == "__main__":
    ensure_fast_blas()  # Linux CPU: the prefill is matrix products; re-executes with OpenBLAS once
    raise SystemExit(main())
