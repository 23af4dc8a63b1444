"""`python -m specmlx.serve.bench`: what the server costs, and how it holds under load.

Two figures, from one run with the models loaded once:
- overhead: tokens per second of one streamed client through HTTP against the
  engine called directly, on the same prompts, interleaved prompt by prompt
  (which goes first alternates), so this machine's drift hits both alike;
- load: N concurrent streaming clients sending R requests each: requests per
  minute, the queue wait's p50 and p95 (the server's own `timings.queue_ms`)
  and how many were refused with 429.
The clients run in a process of their own, as a user's editor or script
would: in this one they would take the GIL and the cores from the server.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

from ..cli import run_cli
from ..drafters import NGRAM, NONE
from ..engine import Engine, GenerationConfig
from ..loading import load_models
from ..mlx_thread import MLXThread
from ..prompting import encode_chat, packaged_prompts_path, read_prompts
from .run import Background
from .serving import build


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m specmlx.serve.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", help="a preset name, model directory or repo id (default: the default preset)")
    p.add_argument("--drafter", help="the drafter (default: the preset's)")
    p.add_argument("--prompts", type=Path, default=packaged_prompts_path(), help="JSONL prompts (id, kind, prompt)")
    p.add_argument("--limit", type=int, default=4, help="prompts for the overhead figure (default 4)")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--clients", type=int, default=8, help="concurrent clients in the load figure (default 8)")
    p.add_argument("--requests", type=int, default=2, help="requests per client (default 2)")
    p.add_argument("--load-tokens", type=int, default=16, help="tokens per load request (default 16)")
    p.add_argument("--max-queue", type=int, default=32)
    p.add_argument("--json", type=Path, help="also write the figures here")
    return p


def streamed(url: str, model: str, text: str, max_tokens: int) -> dict:
    """One streamed chat: tokens, wall time to the last byte, time to the first text, queue wait; or the refusal."""
    import httpx

    body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    began, first, last = time.perf_counter(), None, {}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=3600) as r:
        if r.status_code != 200:
            r.read()
            return {"status": r.status_code}
        for line in r.iter_lines():
            if line.startswith("data: {"):
                event = json.loads(line[6:])
                if first is None and any(c.get("delta", {}).get("content") for c in event.get("choices", [])):
                    first = time.perf_counter()
                last = event if "timings" in event else last
                usage = event.get("usage") or {}
    wall = time.perf_counter() - began
    return {"status": 200, "tokens": usage["completion_tokens"], "wall_s": wall,
            "first_s": (first or began) - began, "queue_s": last["timings"]["queue_ms"] / 1000}


def load_clients(url: str, model: str, texts: list[str], clients: int, requests: int,
                 max_tokens: int) -> tuple[list[dict], float]:
    """`clients` threads each sending `requests` streamed chats at once: their results and the wall time."""
    def client(c: int) -> list[dict]:
        return [streamed(url, model, texts[(c * requests + j) % len(texts)], max_tokens) for j in range(requests)]

    began = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = [r for rs in pool.map(client, range(clients)) for r in rs]
    return results, time.perf_counter() - began


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


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def bench(args: argparse.Namespace) -> int:
    rows = read_prompts(args.prompts)
    mlx = MLXThread()
    say = lambda step: print(f"{step}...", file=sys.stderr)  # noqa: E731
    loaded = mlx.call(load_models, args.target, [args.drafter, NGRAM, NONE], say)
    target, drafters = loaded.target, loaded.drafters
    built = build(mlx, target, drafters, max_tokens=args.max_tokens, slots=2, max_queue=args.max_queue)
    worker = built.worker
    figures: dict = {"target": target.name, "drafter": drafters[0].name, "max_tokens": args.max_tokens}
    away = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    with Background(built.app, worker, timeout=60) as url, away:
        # Overhead: the same prompts, direct and served, interleaved.
        engine = mlx.call(Engine, target.model, drafters[0].fresh(), target.tokenizer)
        runs: dict[str, list[dict]] = {"direct": [], "server": []}
        for i, row in enumerate(rows[: args.limit]):
            prompt = encode_chat(target.tokenizer, [{"role": "user", "content": row.prompt}])  # as the server does
            order = ["direct", "server"] if i % 2 == 0 else ["server", "direct"]
            for way in order:
                run = (mlx.call(direct, engine, prompt, args.max_tokens) if way == "direct"
                       else away.submit(streamed, url, target.name, row.prompt, args.max_tokens).result())
                runs[way].append(run | {"id": row.id})
                print(f"{row.id} {way}: {run['tokens']} tokens in {run['wall_s']:.1f} s", file=sys.stderr)
        figures["overhead"] = {
            "direct_tps": rate(runs["direct"]), "server_tps": rate(runs["server"]),
            "ratio": rate(runs["server"]) / rate(runs["direct"]),
            "decode_ratio": rate(runs["server"], decode=True) / rate(runs["direct"], decode=True),
            "runs": runs}
        # Load: many clients at once.
        results, wall = away.submit(load_clients, url, target.name, [r.prompt for r in rows], args.clients,
                                    args.requests, args.load_tokens).result()
        done = [r for r in results if r["status"] == 200]
        waits = [r["queue_s"] for r in done]
        figures["load"] = {
            "clients": args.clients, "requests": len(results), "completed": len(done),
            "refused_429": sum(r["status"] == 429 for r in results), "wall_s": wall,
            "requests_per_minute": 60 * len(done) / wall,
            "queue_wait_p50_s": statistics.median(waits) if waits else None,
            "queue_wait_p95_s": percentile(waits, 0.95) if waits else None,
            "tokens_per_s": sum(r["tokens"] for r in done) / wall}
    worker.close()
    over, load = figures["overhead"], figures["load"]
    print(f"\nserver overhead ({target.name}, drafter {drafters[0].name}, {len(runs['direct'])} prompts x "
          f"{args.max_tokens} tokens, greedy, one streamed client):")
    print(f"  direct {over['direct_tps']:.2f} tok/s, through the server {over['server_tps']:.2f} tok/s: "
          f"{over['ratio']:.3f}x end to end, {over['decode_ratio']:.3f}x after the first token")
    print(f"load ({load['clients']} clients x {args.requests} requests x {args.load_tokens} tokens, streamed):")
    waits_line = (f"queue wait p50 {load['queue_wait_p50_s']:.1f} s, p95 {load['queue_wait_p95_s']:.1f} s"
                  if load["completed"] else "no request completed")
    print(f"  {load['completed']}/{load['requests']} completed, {load['refused_429']} refused (429), "
          f"{load['requests_per_minute']:.1f} requests/min, {load['tokens_per_s']:.2f} tok/s, {waits_line}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_cli("specmlx serve bench", lambda: bench(args))


if __name__ == "__main__":
    from ..blas import ensure_fast_blas

    ensure_fast_blas()
    sys.exit(main())
