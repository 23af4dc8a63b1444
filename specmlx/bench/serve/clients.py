"""The server bench's clients: streamed chats against any OpenAI-compatible server, timed from outside.

These run in a process of their own (`python -m specmlx.bench.serve` spawns
it), so this module imports no MLX: a spawned process loads it in a moment,
and its threads never take the GIL or the cores from the server they time.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor


def streamed(url: str, model: str, text: str, max_tokens: int, extra: dict | None = None) -> dict:
    """One greedy streamed chat (`extra`: more body fields): its tokens, wall time to the last byte, time
    to the first text, and what the server adds if it does (queue wait, the mean draft length chosen);
    or its refusal's status."""
    import httpx

    body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}} | (extra or {})
    began, first, last, usage = time.perf_counter(), None, {}, {}
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
                usage = event.get("usage") or usage
    wall = time.perf_counter() - began
    queue_ms = last.get("timings", {}).get("queue_ms")
    return {"status": 200, "tokens": usage.get("completion_tokens", 0), "wall_s": wall,
            "first_s": (first or began) - began, "queue_s": None if queue_ms is None else queue_ms / 1000,
            "mean_num_draft": last.get("speculative", {}).get("mean_num_draft")}


def load_clients(url: str, model: str, texts: list[str], clients: int, requests: int,
                 max_tokens: int) -> tuple[list[dict], float]:
    """`clients` threads each sending `requests` streamed chats at once: their results and the wall time."""
    def client(c: int) -> list[dict]:
        return [streamed(url, model, texts[(c * requests + j) % len(texts)], max_tokens) for j in range(requests)]

    began = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = [r for rs in pool.map(client, range(clients)) for r in rs]
    return results, time.perf_counter() - began


def wave(url: str, model: str, texts: list[str], max_tokens: int,
         extra: dict | None = None) -> tuple[list[dict], float]:
    """One client a text, all at once, one request each: their results and the wave's wall time."""
    began = time.perf_counter()
    with ThreadPoolExecutor(len(texts)) as pool:
        results = list(pool.map(lambda text: streamed(url, model, text, max_tokens, extra), texts))
    return results, time.perf_counter() - began


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]
