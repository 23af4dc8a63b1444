"""`python -m specmlx.bench.serve.fim`: what a fill-in-the-middle request costs, with and without drafting.

Ten FIM requests cut from Python's own standard library on this machine: in
each of ten modules, a function's body is cut in the middle, the lines before
the cut are the prompt, a gap of lines is left out (what a good answer would
write), and the lines after it are the suffix. Each is built into token ids
exactly as the server builds a request with a `suffix` (`prompts.completion_prompt`),
then answered greedily by the engine once per drafter: the target alone, the
model drafter, and prompt lookup (which can copy from the suffix). Figures per
drafter: the time to the first token (a fresh cache: the whole prompt is
prefilled), the time to a completion of `--max-tokens` tokens (the end tokens
are ignored, so every answer decodes the same count; where the model's own
answer would have ended is recorded too), tokens per second after the first,
and whether the tokens equal the target's alone. Which drafter goes first
rotates from request to request, so this machine's drift hits all alike.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Sequence

from ...cli import run_cli
from ...drafters import NGRAM, NONE
from ...engine import Engine, GenerationConfig
from ...errors import SpecmlxError
from ...loading import LoadedModel, load_models
from ...options import Parser, add_draft_arguments, add_model_arguments, draft_policy
from ...serve.fim import FimLayout, find_layout
from ...serve.openai.protocol import CompletionRequest
from ...serve.prompts import completion_prompt
from ...vocab import vocab_size

# Modules whose code the requests are cut from: plain Python of several styles.
MODULES = ("argparse", "difflib", "json.decoder", "textwrap", "shlex", "heapq", "fnmatch", "statistics",
           "calendar", "configparser", "tokenize", "pprint")
BODY_LINES = (10, 40)  # a function whose body is this long, at least and at most, is cut


@dataclass(frozen=True)
class FimCase:
    """One request: where it was cut, the text before and after the gap, and the gap itself."""

    id: str
    prefix: str
    suffix: str
    middle: str


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m specmlx.bench.serve.fim", description=__doc__.split("\n\n")[0])
    add_model_arguments(p, drafter="the model drafter (default: the preset's)")
    add_draft_arguments(p)
    p.add_argument("--requests", type=int, default=10, help="FIM requests, one per module (default 10, at most "
                   f"{len(MODULES)})")
    p.add_argument("--max-tokens", type=int, default=32, help="tokens each completion decodes (default 32)")
    p.add_argument("--prefix-lines", type=int, default=48, help="lines before the cut (default 48)")
    p.add_argument("--suffix-lines", type=int, default=16, help="lines after the gap (default 16)")
    p.add_argument("--gap-lines", type=int, default=2, help="lines left out at the cut (default 2)")
    p.add_argument("--json", type=Path, help="also write the figures here")
    return p


def cut_line(source: str) -> int | None:
    """Where to cut `source` (0-based line): the statement nearest the middle of the longest function
    whose body fits `BODY_LINES`; a statement's first line, never a blank line or a docstring's."""
    functions = [node for node in ast.walk(ast.parse(source)) if isinstance(node, (ast.FunctionDef,
                                                                                      ast.AsyncFunctionDef))]
    fitting = [f for f in functions if BODY_LINES[0] <= f.end_lineno - f.body[0].lineno + 1 <= BODY_LINES[1]]
    if not fitting:
        return None
    f = max(fitting, key=lambda f: (f.end_lineno - f.body[0].lineno, -f.lineno))
    docstring = f.body[0] if isinstance(f.body[0], ast.Expr) and isinstance(f.body[0].value, ast.Constant) else None
    starts = {n.lineno for n in ast.walk(f) if isinstance(n, ast.stmt) and n is not f and n is not docstring}
    middle = (f.body[0].lineno + f.end_lineno) / 2
    return min(starts, key=lambda line: (abs(line - middle), line)) - 1 if starts else None


def cut_cases(count: int, prefix_lines: int, suffix_lines: int, gap_lines: int) -> list[FimCase]:
    """`count` requests, one per module of `MODULES`: a function's body cut at a statement near its
    middle, the cursor after that line's indentation."""
    cases = []
    for name in MODULES:
        source = inspect.getsource(importlib.import_module(name))
        cut = cut_line(source)
        if cut is None:
            continue
        lines = source.splitlines(keepends=True)
        indent = lines[cut][: len(lines[cut]) - len(lines[cut].lstrip())]
        gap = cut + gap_lines
        cases.append(FimCase(f"{name}:{cut + 1}", "".join(lines[max(0, cut - prefix_lines) : cut]) + indent,
                             "".join(lines[gap : gap + suffix_lines]), "".join(lines[cut:gap])[len(indent):]))
        if len(cases) == count:
            return cases
    raise SpecmlxError(f"only {len(cases)} of {count} requests could be cut from {', '.join(MODULES)}")


def answer(engine: Engine, prompt: list[int], config: GenerationConfig, ends: frozenset[int]) -> dict:
    """One completion from a fresh cache: its tokens, the time to the first and to the last,
    and where the model's own answer would have ended."""
    engine.forget(0)
    began, first, tokens = time.perf_counter(), None, []
    generation = engine.generate(prompt, config)
    for event in generation:
        tokens += [e.token for e in event.tokens]
        if tokens and first is None:
            first = time.perf_counter()
    done = time.perf_counter()
    stats = generation.stats
    own = next((i for i, t in enumerate(tokens) if t in ends), None)
    return {"tokens": tokens, "first_s": (first or done) - began, "total_s": done - began, "own_end": own,
            "rounds": stats.rounds, "accepted": stats.accepted}


def engines(target: LoadedModel, drafters) -> dict[str, Engine]:
    """Each drafter's engine, end tokens ignored (every answer decodes `--max-tokens`), the target alone first."""
    order = sorted(drafters, key=lambda d: (d.name != NONE, d.name == NGRAM))
    return {d.name: Engine(target.model, d.fresh(), target.tokenizer, eos_token_ids=()) for d in order}


def run_cases(target: LoadedModel, layout: FimLayout, rows: dict[str, Engine], cases: list[FimCase],
              config: GenerationConfig) -> dict[str, list[dict]]:
    """Every case with every drafter, the first drafter rotating; one untimed warm-up first."""
    window = rows[NONE].context_window
    ends = layout.stops | frozenset(target.tokenizer.eos_token_ids)
    names, runs = list(rows), {name: [] for name in rows}
    for i, case in enumerate(cases):
        request = CompletionRequest(model=target.name, prompt=case.prefix, suffix=case.suffix)
        prompt = completion_prompt(target.tokenizer, request, vocab_size(target.model), window, layout)
        if i == 0:  # warm-up: MLX builds its kernels on first use
            for engine in rows.values():
                answer(engine, prompt, replace(config, max_tokens=min(4, config.max_tokens)), ends)
        for name in names[i % len(names):] + names[: i % len(names)]:
            run = answer(rows[name], prompt, config, ends)
            runs[name].append(run | {"id": case.id, "prompt_tokens": len(prompt)})
            print(f"{case.id} {name}: {len(prompt)} prompt tokens, first token {run['first_s']:.2f} s, "
                  f"{len(run['tokens'])} tokens {run['total_s']:.2f} s", file=sys.stderr)
    return runs


def summary(runs: dict[str, list[dict]]) -> dict[str, dict]:
    """Per drafter: first-token times, completion times, decode speed and agreement with the target alone."""
    alone = [r["tokens"] for r in runs[NONE]]
    out = {}
    for name, rs in runs.items():
        decode_s = sum(r["total_s"] - r["first_s"] for r in rs)
        rounds = sum(r["rounds"] for r in rs)
        out[name] = {"ttft_p50_s": statistics.median(r["first_s"] for r in rs),
                     "ttft_mean_s": statistics.fmean(r["first_s"] for r in rs),
                     "total_mean_s": statistics.fmean(r["total_s"] for r in rs),
                     "decode_tps": sum(len(r["tokens"]) - 1 for r in rs) / decode_s if decode_s > 0 else None,
                     "mean_accepted": (sum(r["accepted"] for r in rs) + rounds) / rounds if rounds else None,
                     "same_as_target": sum(r["tokens"] == want for r, want in zip(rs, alone)), "requests": len(rs)}
    return out


def _cell(value: float | None, spec: str) -> str:
    return "–" if value is None else f"{value:{spec}}"


def table(figures: dict) -> str:
    """The markdown table: a line per drafter, the target alone first."""
    rows = figures["summary"]
    base = rows[NONE]["total_mean_s"]
    lines = [f"| drafter | TTFT p50 (s) | TTFT mean (s) | {figures['max_tokens']} tokens mean (s) | × none | "
             "tok/s after the first | mean acc. | = none |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['ttft_p50_s']:.2f} | {r['ttft_mean_s']:.2f} | {r['total_mean_s']:.2f} | "
                     f"{base / r['total_mean_s']:.2f}× | {_cell(r['decode_tps'], '.2f')} | "
                     f"{_cell(r['mean_accepted'], '.2f')} | {r['same_as_target']}/{r['requests']} |")
    return "\n".join(lines)


def bench(args: argparse.Namespace) -> int:
    if not 1 <= args.requests <= len(MODULES) or args.max_tokens < 1:
        raise SpecmlxError(f"--requests must be 1..{len(MODULES)} and --max-tokens >= 1")
    cases = cut_cases(args.requests, args.prefix_lines, args.suffix_lines, args.gap_lines)
    say = lambda step: print(f"{step}...", file=sys.stderr)  # noqa: E731
    loaded = load_models(args.target, [args.drafter, NGRAM, NONE], say)
    layout = find_layout(loaded.target.tokenizer)
    if layout is None:
        raise SpecmlxError(f"{loaded.target.name} has no fill-in-the-middle tokens")
    config = GenerationConfig(max_tokens=args.max_tokens, policy=draft_policy(args))
    runs = run_cases(loaded.target, layout, engines(loaded.target, loaded.drafters), cases, config)
    figures = {"target": loaded.target.name, "layout": layout.name, "max_tokens": args.max_tokens,
               "policy": str(draft_policy(args)), "cases": [asdict(c) for c in cases], "runs": runs,
               "summary": summary(runs)}
    print(f"\nfill in the middle ({figures['target']}, {len(cases)} requests cut from the standard library, "
          f"{args.max_tokens} tokens each, greedy, draft policy {figures['policy']}):")
    print(table(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("specmlx bench serve fim", lambda: bench(build_parser().parse_args(argv)))


if __name__ == "__main__":
    from ...blas import ensure_fast_blas

    ensure_fast_blas()
    sys.exit(main())
