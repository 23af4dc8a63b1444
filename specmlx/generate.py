"""`specmlx generate ...`: one generation from the command line."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import mlx.core as mx

from .blas import describe
from .cli import run_cli
from .distributed import Lockstep
from .distributed.cli import add_arguments as add_distributed_arguments, joined, leads, placement
from .distributed.follower import follow
from .engine import Engine, GenerationConfig
from .errors import SpecmlxError
from .events import Source
from .loading import load_models
from .kv_flags import add_kv_arguments
from .options import (Parser, add_draft_arguments, add_model_arguments, add_sampling_arguments,
                      draft_policy, kv_bits, sampling_params)
from .prompting import encode_chat, encode_output, encode_text, has_chat_template
from .schedule import AutoEstimate
from .stats import GenerationStats
from .warmup import warm_up_at_load

DRAFT_STYLE = "\033[32m"  # accepted draft tokens: green
RESET = "\033[0m"


def build_parser() -> argparse.ArgumentParser:
    gen = Parser(prog="specmlx generate", description="Generate text from a prompt with exact speculative decoding.")
    add_model_arguments(gen, drafter="default: the preset's drafter, else ngram")
    source = gen.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="prompt text")
    source.add_argument("--prompt-file", type=Path, help="read the prompt from this file")
    gen.add_argument("--chat", action="store_true", help="wrap the prompt in the tokenizer's chat template")
    gen.add_argument("--system", help="system message (with --chat)")
    gen.add_argument("--max-tokens", type=int, default=256)
    add_sampling_arguments(gen)
    add_draft_arguments(gen)
    add_kv_arguments(gen)
    gen.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    gen.add_argument("--prediction-file", type=Path, default=None,
                     help="the text you expect the answer to be (a file to edit): drafts copy it where the answer agrees")
    gen.add_argument("--profile", action="store_true", help="time drafting and verifying apart (one more sync per round)")
    gen.add_argument("--json", action="store_true", help="print one JSON object: text, tokens, sources, stats")
    add_distributed_arguments(gen)
    return gen


def read_prompt(args: argparse.Namespace) -> str:
    if args.prompt is not None:
        return args.prompt
    return read_text(args.prompt_file, "prompt")


def read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecmlxError(f"{path}: no such {what} file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise SpecmlxError(f"{path}: cannot read {what} ({err})") from None


def encode(tokenizer, text: str, chat: bool, system: str | None) -> list[int]:
    if not chat:
        if system is not None:
            raise SpecmlxError("--system needs --chat")
        return encode_text(tokenizer, text)
    if not has_chat_template(tokenizer):
        raise SpecmlxError("this tokenizer has no chat template; drop --chat")
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": text}
    ]
    return encode_chat(tokenizer, messages)


def format_stats(stats: GenerationStats) -> str:
    hist = " ".join(f"{n}:{c}" for n, c in enumerate(stats.accepted_histogram))
    chosen = " ".join(f"{n}:{c}" for n, c in enumerate(stats.draft_histogram) if c)
    timing = (
        f"time: draft {stats.draft_s:.2f} s, verify {stats.verify_s:.2f} s, other {stats.other_s:.2f} s"
        + ("" if stats.profiled else " (draft and verify share one graph; --profile splits them)")
    )
    return "\n".join([
        f"prompt: {stats.prompt_tokens} tokens, {stats.prompt_tps:.1f} tok/s",
        f"generation: {stats.generation_tokens} tokens, {stats.generation_tps:.2f} tok/s "
        f"(finished: {stats.finish_reason})",
        f"drafter {stats.drafter}: {stats.rounds} rounds, drafted {stats.drafted}, accepted "
        f"{stats.accepted} ({100 * stats.acceptance_rate:.1f}%), mean accepted length "
        f"{stats.mean_accepted:.2f}",
        f"accepted drafts per round (n:rounds): {hist}",
        f"draft length per round (k:rounds): {chosen or '-'}" + (" (auto)" if stats.auto else "")
        + f"; {stats.plain_rounds} rounds proposed nothing, {stats.probes} of them probed the drafter",
        *([auto_line(stats.estimate)] if stats.estimate is not None else []),
        *([f"prediction: {stats.prediction_accepted} of its {stats.prediction_tokens} tokens in the answer "
           f"({stats.prediction_drafted} proposed)"] if stats.prediction_tokens else []),
        f"target forwards {stats.target_forwards}, host syncs {stats.host_syncs}",
        timing,
    ])


def auto_line(estimate: AutoEstimate) -> str:
    """What the automatic draft length measured."""
    rates = " ".join(f"{r:.2f}" for r in estimate.acceptance[:6])
    costs = estimate.costs
    measured = "nothing timed yet" if costs is None else (
        f"a plain round {1000 * costs.base_s:.0f} ms, a drafter step {1000 * costs.step_s:.0f} ms, "
        f"verifying drafts {1000 * costs.jump_s:.0f} ms + {1000 * costs.width_s:.0f} ms each")
    return f"auto measured: {measured}; acceptance by draft position {rates}"


def generate(args: argparse.Namespace) -> int:
    config = GenerationConfig(
        max_tokens=args.max_tokens, seed=args.seed, sampling=sampling_params(args), policy=draft_policy(args),
        stop=tuple(args.stop), profile=args.profile,
        continues_text=not args.chat,  # a plain prompt's answer continues its text
    )
    with joined(args) as group:
        text = read_prompt(args) if leads(group) else None  # the others take rank 0's prompt, as tokens
        # Rank 0 alone proposes, so it alone reads the prediction.
        predicted = read_text(args.prediction_file, "prediction") if args.prediction_file and leads(group) else None
        # Loading takes seconds to minutes: say what is happening, on a terminal only.
        progress = (lambda step: print(f"{step}...", file=sys.stderr)) if sys.stderr.isatty() and leads(group) else None
        loaded = load_models(args.target, [args.drafter], progress, placement(args, group))
        target = loaded.target
        lockstep = loaded.peers.lockstep()
        prompt = encode(target.tokenizer, text, args.chat, args.system) if leads(group) else None
        if predicted:
            config = replace(config, prediction=tuple(encode_output(target.tokenizer, predicted)))
        if lockstep is not None:
            prompt = lockstep.shared(prompt)
        engine = Engine(target.model, loaded.drafters[0], target.tokenizer, peers=loaded.peers, kv=kv_bits(args))
        warm_up_at_load(target.model, loaded.drafters, config.policy, loaded.peers.one_process, progress, kv_bits(args))
        if not leads(group):  # rank 0 alone prints; this rank follows its rounds to the end
            follow(engine, prompt, config, lockstep)
            return 0
        return report(args, engine.generate(prompt, config), lockstep)


def report(args: argparse.Namespace, run, lockstep: Lockstep | None) -> int:
    """Stream the answer to stdout (accepted drafts in green), then the stats."""
    color = sys.stdout.isatty() and not args.json
    events = []
    for event in run.token_events():
        events.append(event)
        if not args.json:
            styled = color and event.source is Source.DRAFT and event.text
            sys.stdout.write(f"{DRAFT_STYLE}{event.text}{RESET}" if styled else event.text)
            sys.stdout.flush()
    if args.json:
        json.dump({
            "text": "".join(e.text for e in events) + run.tail,
            "tokens": [e.token for e in events],
            "sources": [e.source.value for e in events],
            "stats": run.stats.to_dict(),
            **({"lockstep": lockstep_dict(lockstep)} if lockstep is not None else {}),
        }, sys.stdout)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(run.tail + "\n")
        if color:
            print(f"({DRAFT_STYLE}green{RESET}: accepted draft tokens)", file=sys.stderr)
        print(format_stats(run.stats), file=sys.stderr)
        if lockstep is not None:
            info = lockstep_dict(lockstep)
            print(f"ranks: {info['ranks']}; rank 0's round messages: {info['messages']}, "
                  f"{info['control_ms']:.2f} ms each (host wait, peers included)", file=sys.stderr)
        print(f"backend: {mx.default_device()}, BLAS: {describe()}", file=sys.stderr)
    return 0


def lockstep_dict(lockstep: Lockstep) -> dict:
    """What keeping the ranks in step cost rank 0."""
    n = lockstep.messages
    return {"ranks": lockstep.group.size, "messages": n,
            "control_ms": 1000 * lockstep.control_s / n if n else 0.0}


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("specmlx generate", lambda: generate(build_parser().parse_args(argv)))
