"""`python -m specmlx.bench.serve --clients 1,2,4,8,16`: throughput and first tokens as clients grow.

For each client count N, N streaming clients (threads of one process of
their own) each send one greedy chat, with a prompt of their own, all at
once, to each of four servers in turn:
1. `batched-auto`: this server batching (`max_batch`: the largest N, at
   least 16) with the automatic draft length, `DraftPolicy(num_draft=None)`;
2. `batched-none`: the same server, each request asking for drafter `none`;
3. `one-at-a-time`: a second server over the same loaded models with
   `max_batch` 1 and the old default policy (k = `START_DRAFT`, the
   preset's drafter);
4. `mlx-lm`: `mlx_lm.server` on the same target directory, a subprocess on
   127.0.0.1 (it batches, without a drafter: `--decode-concurrency` as 1's
   `max_batch`, its own default `--prompt-concurrency`); `--no-mlx-lm` skips it.
Per N the four waves run back to back, in the reverse order every other N,
so each N's figures come from the same minutes of this machine's drift.
A row's figures at N: every token over the wave's wall time, the clients'
time to first text (p50, p95), and the mean over its requests of the draft
length each chose a round (`speculative.mean_num_draft`; `-` without a drafter).
Each request's text begins "Request <serial>: ", so no server answers from
a cache another wave left (the prompts repeat across rows and N).
With `--skeleton`, every server serves the models' skeletons (`bench/skeleton.py`:
steps of milliseconds, as on a Mac's GPU); mlx_lm.server the same skeleton, saved.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ...blas import describe
from ...drafters import NONE
from ...errors import SpecmlxError
from ...loading import Loaded, load_models
from ...presets import default_preset_name
from ..skeleton import Skeleton, save_skeleton, skeleton_specs
from ...mlx_thread import MLXThread
from ...policy import START_DRAFT, DraftPolicy
from ...prompting import packaged_prompts_path, read_prompts
from ...serve.run import Background, bind
from ...serve.builder import build
from .clients import percentile, wave

ROWS = ("batched-auto", "batched-none", "one-at-a-time", "mlx-lm")  # the table's rows, in its order
MIN_BATCH = 16  # the sweep's batched server decodes at least this many at once (more than `specmlx serve`'s default)
PROMPT_CONCURRENCY = 8  # mlx_lm.server's own default: prompts it prefills together
WARMUP_TOKENS = 8  # one untimed request per row first: loading, first kernels, the automatic length's first costs
READY_S = 600  # mlx_lm.server's /health should answer by then


@dataclass(frozen=True)
class Way:
    """A row of the table: a server, and what each request adds to its body."""

    name: str
    label: str
    url: str
    model: str
    extra: dict = field(default_factory=dict)
    drafts: bool = True  # its requests' mean chosen draft length means something


def last_words(log: Path) -> str:
    """The last line of mlx_lm.server's output that is not http.server's access log (its error, usually)."""
    lines = [line for line in log.read_text().splitlines() if line.strip() and " - - [" not in line]
    return lines[-1].strip() if lines else "no output"


class MlxLmServer:
    """`mlx_lm.server` on a model directory, a subprocess on 127.0.0.1 at a free port: `with ... as url`.
    Its output goes to `log`, kept only if something failed; it inherits this process's environment
    (its BLAS preload too), offline."""

    def __init__(self, model: Path, decode_concurrency: int, max_tokens: int, log: Path) -> None:
        sock = bind("127.0.0.1", 0)
        self.port = sock.getsockname()[1]
        sock.close()  # it binds the port itself: a free one a moment ago
        self.argv = [sys.executable, "-m", "mlx_lm", "server", "--model", str(model), "--host", "127.0.0.1",
                     "--port", str(self.port), "--decode-concurrency", str(decode_concurrency),
                     "--prompt-concurrency", str(PROMPT_CONCURRENCY), "--max-tokens", str(max_tokens),
                     "--log-level", "WARNING"]
        self.log = log

    def __enter__(self) -> str:
        import httpx

        self.out = self.log.open("w")
        env = dict(os.environ, HF_HUB_OFFLINE="1")  # a local directory only: a bad path must not become a download
        self.proc = subprocess.Popen(self.argv, stdout=self.out, stderr=subprocess.STDOUT, env=env)
        url, deadline = f"http://127.0.0.1:{self.port}", time.monotonic() + READY_S
        while time.monotonic() < deadline:
            try:
                health = httpx.get(f"{url}/health", timeout=2).status_code
            except httpx.TransportError:
                health = None
            if health == 200:
                return url
            if health == 503 or self.proc.poll() is not None:  # 503: its generation thread died (a bad model)
                self.stop()
                raise SpecmlxError(f"mlx_lm.server failed ({last_words(self.log)}); its output: {self.log}")
            time.sleep(0.25)
        self.stop()
        raise SpecmlxError(f"mlx_lm.server did not answer /health within {READY_S} s (see {self.log})")

    def __exit__(self, kind, *exc) -> None:
        self.stop()
        if kind is None:
            self.log.unlink(missing_ok=True)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.out.close()


def summarize(results: list[dict], wall: float, drafts: bool) -> dict:
    """A wave's figures: every token over its wall time, time to first text, the mean chosen draft length."""
    done = [r for r in results if r["status"] == 200]
    firsts = [r["first_s"] for r in done]
    ks = [r["mean_num_draft"] for r in done if r.get("mean_num_draft") is not None]
    tokens = sum(r["tokens"] for r in done)
    return {"requests": len(results), "completed": len(done), "tokens": tokens, "wall_s": wall,
            "tokens_per_s": tokens / wall, "ttft_p50_s": statistics.median(firsts) if firsts else None,
            "ttft_p95_s": percentile(firsts, 0.95) if firsts else None,
            "mean_k": statistics.mean(ks) if drafts and ks else None, "results": results}


def run_waves(away: ProcessPoolExecutor, ways: list[Way], texts: list[str], clients: Sequence[int],
              max_tokens: int) -> list[dict]:
    """Every N's waves, one a row, back to back; the order reversed every other N."""
    serial, waves = itertools.count(), []
    for way in ways:  # untimed: what a first request pays is no row's figure
        away.submit(wave, way.url, way.model, [f"Warm-up: {texts[0]}"], WARMUP_TOKENS, way.extra).result()
    for i, n in enumerate(clients):
        order = ways if i % 2 == 0 else ways[::-1]
        rows = {}
        for way in order:
            batch = [f"Request {next(serial)}: {texts[c % len(texts)]}" for c in range(n)]
            results, wall = away.submit(wave, way.url, way.model, batch, max_tokens, way.extra).result()
            rows[way.name] = row = summarize(results, wall, way.drafts)
            print(f"N={n} {way.name}: {row['completed']}/{n} done, {row['tokens']} tokens in {wall:.1f} s",
                  file=sys.stderr)
        waves.append({"clients": n, "order": [w.name for w in order], "rows": rows})
    return waves


def _cell(value: float | None, form: str) -> str:
    return "-" if value is None else format(value, form)


def table(figures: dict) -> str:
    """The markdown table: a line per N and row, rows in their fixed order whatever order they ran in."""
    lines = ["| clients | server | tok/s | × mlx_lm | TTFT p50 (s) | TTFT p95 (s) | mean k | done |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for w in figures["waves"]:
        base = w["rows"].get("mlx-lm", {}).get("tokens_per_s")
        for name, label in figures["rows"].items():
            r = w["rows"][name]
            ratio = r["tokens_per_s"] / base if base else None
            lines.append(f"| {w['clients']} | {label} | {r['tokens_per_s']:.2f} | {_cell(ratio, '.2f')} | "
                         f"{_cell(r['ttft_p50_s'], '.2f')} | {_cell(r['ttft_p95_s'], '.2f')} | "
                         f"{_cell(r['mean_k'], '.2f')} | {r['completed']}/{r['requests']} |")
    return "\n".join(lines)


def ways_of(urls: tuple[str, str], model: str, max_batch: int, drafter: str) -> list[Way]:
    """Rows 1-3: the batched server's two, then the one-at-a-time server's."""
    batched, alone = urls
    return [Way("batched-auto", f"batched (max_batch {max_batch}), auto k, {drafter}", batched, model),
            Way("batched-none", f"batched (max_batch {max_batch}), no drafter", batched, model,
                {"speculative": {"drafter": NONE}}, drafts=False),
            Way("one-at-a-time", f"one at a time (max_batch 1), k={START_DRAFT}, {drafter}", alone, model)]


def serve_and_run(args, mlx: MLXThread, loaded, clients: list[int], texts: list[str], max_batch: int) -> dict:
    """Build both servers over the loaded pair, start mlx_lm.server if asked, and run the waves."""
    target, drafters = loaded.target, loaded.drafters
    queue = max(args.max_queue, max(clients))  # the one-at-a-time server queues a whole wave
    common = {"max_tokens": args.max_tokens, "max_queue": queue}
    batched = build(mlx, target, drafters, policy=DraftPolicy(num_draft=None), max_batch=max_batch, **common)
    alone = build(mlx, target, drafters, policy=DraftPolicy(), max_batch=1, **common)
    out: dict = {}
    with ExitStack() as stack:
        urls = (stack.enter_context(Background(batched.app, batched.worker, timeout=60)),
                stack.enter_context(Background(alone.app, alone.worker, timeout=60)))
        ways = ways_of(urls, target.name, max_batch, drafters[0].name)
        if args.mlx_lm and "mlx-lm" in args.rows:
            log = Path(tempfile.mkstemp(prefix="mlx_lm_server.", suffix=".log")[1])
            path = target.path
            if args.skeleton is not None:  # mlx_lm.server loads from disk: the same skeleton, saved
                saved = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="skeleton.")))
                path = mlx.call(save_skeleton, target, args.skeleton, saved)
            server = MlxLmServer(path, max_batch, args.max_tokens, log)
            ways.append(Way("mlx-lm", f"mlx_lm.server (decode-concurrency {max_batch}, prompt-concurrency "
                            f"{PROMPT_CONCURRENCY}), no drafter", stack.enter_context(server), "default_model",
                            drafts=False))
            out["mlx_lm_argv"] = server.argv
        ways = [w for w in ways if w.name in args.rows]
        away = stack.enter_context(ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")))
        out["rows"] = {w.name: w.label for w in ways}
        out["waves"] = run_waves(away, ways, texts, clients, args.max_tokens)
    batched.worker.close()  # leaving the servers stopped both workers; this closes the MLX thread they share
    return out


def load_served(args, specs: list[str | None], say) -> Loaded:
    """The target and drafters: their weights, or with `--skeleton` their skeletons (`self` drafts
    with the target's own)."""
    if args.skeleton is None:
        return load_models(args.target, specs, say)
    target = args.target or default_preset_name()
    specs = [spec if spec is None else skeleton_specs(target, [spec])[0] for spec in specs]
    return load_models(target, specs, say, Skeleton(args.skeleton))


def sweep(args, clients: list[int]) -> dict:
    """Load the pair once, run the sweep, print its table; the figures (`--json` writes them)."""
    prompts = args.prompts or packaged_prompts_path()
    texts = [row.prompt for row in read_prompts(prompts)]
    max_batch = args.max_batch or max(MIN_BATCH, *clients)
    mlx = MLXThread()
    say = lambda step: print(f"{step}...", file=sys.stderr)  # noqa: E731
    loaded = mlx.call(load_served, args, [args.drafter, NONE], say)
    began = time.perf_counter()
    figures = {"target": loaded.target.name, "target_path": str(loaded.target.path), "skeleton": args.skeleton,
               "drafter": loaded.drafters[0].name, "prompts": str(prompts), "max_tokens": args.max_tokens,
               "requests_per_client": 1, "max_batch": max_batch, "blas": describe(), "clients": clients}
    figures |= serve_and_run(args, mlx, loaded, clients, texts, max_batch)
    figures["sweep_s"] = time.perf_counter() - began
    print(f"\n{figures['target']} + {figures['drafter']}, greedy, {args.max_tokens} tokens a request, one request "
          f"a client, prompts {prompts}; {figures['blas']}; the rows of each N ran back to back, in the order "
          f"reversed every other N; sweep {figures['sweep_s'] / 60:.1f} min")
    if "mlx_lm_argv" in figures:
        print("mlx_lm.server: " + " ".join(figures["mlx_lm_argv"][3:]))
    print(table(figures))
    return figures
