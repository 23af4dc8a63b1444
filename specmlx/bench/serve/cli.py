"""`python -m specmlx.bench.serve`: what the server costs, and how it holds under load.

Two figures, from one run with the models loaded once:
- overhead: tokens per second of one streamed client through HTTP against the
  engine called directly, on the same prompts, interleaved prompt by prompt
  (which goes first alternates), so this machine's drift hits both alike;
- load: N concurrent streaming clients sending R requests each: requests per
  minute, the queue wait's p50 and p95 (the server's own `timings.queue_ms`)
  and how many were refused with 429.
The clients run in a process of their own, as a user's editor or script
would: in this one they would take the GIL and the cores from the server.

`--clients` with a list (`1,2,4,8,16`; `4,` for one N) runs the client sweep
instead (`sweep.py`): for each N, N clients at once against this server
batched with the automatic draft length, the same without a drafter, a
server of the same models one request at a time, and mlx_lm.server, in one
table (tok/s, time to first token p50 and p95, mean chosen draft length).
Its prompts default to the packaged ones, as the other figures' do.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Sequence

from ...cli import run_cli
from ...drafters import NGRAM, NONE
from ...engine import Engine, GenerationConfig
from ...errors import SpecmlxError
from ...mlx_thread import MLXThread
from ...prompting import encode_chat, packaged_prompts_path, read_prompts
from ...serve.run import Background
from ...serve.builder import build
from .clients import load_clients, percentile, streamed
from ..cli import check_skeleton
from ..skeleton import HEAD_DIM
from .sweep import MIN_BATCH, ROWS, load_served, sweep


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m specmlx.bench.serve", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n")[2])
    p.add_argument("--target", help="a preset name, model directory or repo id (default: the default preset)")
    p.add_argument("--drafter", help="the drafter (default: the preset's)")
    p.add_argument("--prompts", type=Path, help="JSONL prompts (id, kind, prompt; a row's prediction, schema "
                   "and tools are not sent); default: the packaged ones")
    p.add_argument("--limit", type=int, default=4, help="prompts for the overhead figure (default 4)")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens a request in the overhead figure and the "
                   "sweep (default 64)")
    p.add_argument("--clients", type=clients_spec, default=8, metavar="N|N1,N2,...",
                   help="N: concurrent clients in the load figure (default 8); a list (1,2,4,8,16, or 4, for one "
                   "N): the client sweep instead of both figures, N clients at once for each N")
    p.add_argument("--requests", type=int, default=2, help="requests per client in the load figure (default 2)")
    p.add_argument("--load-tokens", type=int, default=16, help="tokens per load request (default 16)")
    p.add_argument("--max-queue", type=int, default=32)
    p.add_argument("--max-batch", type=int, help="the sweep's batched server: requests decoded at once, and "
                   f"mlx_lm.server's --decode-concurrency (default: the largest N, at least {MIN_BATCH})")
    p.add_argument("--no-mlx-lm", dest="mlx_lm", action="store_false",
                   help="the sweep without its mlx_lm.server row")
    p.add_argument("--rows", type=rows_spec, default=ROWS, metavar="NAMES",
                   help=f"the sweep's rows, comma-separated, of {', '.join(ROWS)} (default: all)")
    p.add_argument("--skeleton", type=int, nargs="?", const=HEAD_DIM, metavar="HEAD_DIM",
                   help="serve skeletons of the models instead of their weights: real layers, heads, vocabulary "
                        f"and tokenizer at hidden = heads x HEAD_DIM (default {HEAD_DIM}), random weights; steps "
                        "of milliseconds, as on a Mac's GPU (mlx_lm.server serves the same skeleton, saved)")
    p.add_argument("--json", type=Path, help="also write the figures here")
    return p


def rows_spec(text: str) -> tuple[str, ...]:
    """`batched-auto,batched-none`: some of the sweep's rows (to measure again what changed)."""
    rows = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [row for row in rows if row not in ROWS]
    if not rows or unknown:
        raise argparse.ArgumentTypeError(f"rows are some of {', '.join(ROWS)}; got {text!r}")
    return rows


def clients_spec(text: str) -> int | list[int]:
    """`8` is a count (the load figure); `1,2,4` or `4,` a list (the sweep)."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or a comma-separated list, got {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"client counts must be >= 1, got {text!r}")
    return counts if "," in text else counts[0]


def direct(engine: Engine, prompt: list[int], max_tokens: int) -> dict:
    began, first, tokens = time.perf_counter(), None, 0
    for event in engine.generate(prompt, GenerationConfig(max_tokens=max_tokens)):
        tokens += len(event.tokens)
        if event.tokens:
            first = first or time.perf_counter()
    return {"tokens": tokens, "wall_s": time.perf_counter() - began, "first_s": (first or began) - began}


def rate(runs: list[dict], decode: bool = False) -> float:
    """Tokens per second over all runs: end to end, or after the first token (decode)."""
    tokens = sum(r["tokens"] - (1 if decode else 0) for r in runs)
    return tokens / sum(r["wall_s"] - (r["first_s"] if decode else 0) for r in runs)


def overhead(mlx: MLXThread, target, drafter, away: ProcessPoolExecutor, url: str, rows, max_tokens: int) -> dict:
    """The same prompts, direct and served, interleaved (which goes first alternates)."""
    engine = mlx.call(Engine, target.model, drafter.fresh(), target.tokenizer)
    runs: dict[str, list[dict]] = {"direct": [], "server": []}
    for i, row in enumerate(rows):
        prompt = encode_chat(target.tokenizer, [{"role": "user", "content": row.prompt}])  # as the server does
        order = ["direct", "server"] if i % 2 == 0 else ["server", "direct"]
        for way in order:
            run = (mlx.call(direct, engine, prompt, max_tokens) if way == "direct"
                   else away.submit(streamed, url, target.name, row.prompt, max_tokens).result())
            runs[way].append(run | {"id": row.id})
            print(f"{row.id} {way}: {run['tokens']} tokens in {run['wall_s']:.1f} s", file=sys.stderr)
    return {"direct_tps": rate(runs["direct"]), "server_tps": rate(runs["server"]),
            "ratio": rate(runs["server"]) / rate(runs["direct"]),
            "decode_ratio": rate(runs["server"], decode=True) / rate(runs["direct"], decode=True), "runs": runs}


def load(away: ProcessPoolExecutor, url: str, model: str, texts: list[str], args: argparse.Namespace) -> dict:
    """Many clients at once: requests per minute, the queue wait, refusals."""
    results, wall = away.submit(load_clients, url, model, texts, args.clients, args.requests,
                                args.load_tokens).result()
    done = [r for r in results if r["status"] == 200]
    waits = [r["queue_s"] for r in done]
    return {"clients": args.clients, "requests": len(results), "completed": len(done),
            "refused_429": sum(r["status"] == 429 for r in results), "wall_s": wall,
            "requests_per_minute": 60 * len(done) / wall,
            "queue_wait_p50_s": statistics.median(waits) if waits else None,
            "queue_wait_p95_s": percentile(waits, 0.95) if waits else None,
            "tokens_per_s": sum(r["tokens"] for r in done) / wall}


def report(figures: dict, args: argparse.Namespace) -> None:
    over, load = figures["overhead"], figures["load"]
    print(f"\nserver overhead ({figures['target']}, drafter {figures['drafter']}, {len(over['runs']['direct'])} "
          f"prompts x {args.max_tokens} tokens, greedy, one streamed client):")
    print(f"  direct {over['direct_tps']:.2f} tok/s, through the server {over['server_tps']:.2f} tok/s: "
          f"{over['ratio']:.3f}x end to end, {over['decode_ratio']:.3f}x after the first token")
    print(f"load ({load['clients']} clients x {args.requests} requests x {args.load_tokens} tokens, streamed):")
    waits_line = (f"queue wait p50 {load['queue_wait_p50_s']:.1f} s, p95 {load['queue_wait_p95_s']:.1f} s"
                  if load["completed"] else "no request completed")
    print(f"  {load['completed']}/{load['requests']} completed, {load['refused_429']} refused (429), "
          f"{load['requests_per_minute']:.1f} requests/min, {load['tokens_per_s']:.2f} tok/s, {waits_line}")


def bench(args: argparse.Namespace) -> int:
    """Both figures, the models loaded once; `--json` writes them."""
    rows = read_prompts(args.prompts or packaged_prompts_path())
    mlx = MLXThread()
    say = lambda step: print(f"{step}...", file=sys.stderr)  # noqa: E731
    loaded = mlx.call(load_served, args, [args.drafter, NGRAM, NONE], say)
    target, drafters = loaded.target, loaded.drafters
    built = build(mlx, target, drafters, max_tokens=args.max_tokens, slots=2, max_queue=args.max_queue)
    figures: dict = {"target": target.name, "drafter": drafters[0].name, "max_tokens": args.max_tokens}
    away = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    with Background(built.app, built.worker, timeout=60) as url, away:
        figures["overhead"] = overhead(mlx, target, drafters[0], away, url, rows[: args.limit], args.max_tokens)
        figures["load"] = load(away, url, target.name, [r.prompt for r in rows], args)
    built.worker.close()
    report(figures, args)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


def run_sweep(args: argparse.Namespace) -> int:
    if args.max_batch is not None and args.max_batch < 1:
        raise SpecmlxError(f"--max-batch must be >= 1, got {args.max_batch}")
    if not args.mlx_lm and set(args.rows) == {"mlx-lm"}:
        raise SpecmlxError("--rows mlx-lm with --no-mlx-lm leaves no row to run")
    figures = sweep(args, args.clients)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.skeleton is not None:
        check_skeleton(args.skeleton, distributed=False)
    return run_sweep(args) if isinstance(args.clients, list) else bench(args)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_cli("specmlx bench serve", lambda: run(args))
