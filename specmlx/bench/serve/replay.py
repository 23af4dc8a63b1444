"""`python -m specmlx.bench.serve.replay`: an agent session replayed against real servers, per configuration.

The session (`session.json`, `session.py`) is one coding agent's, as Claude Code sends it to
/v1/messages: a long system prompt and tool schemas, turns with tool calls and results, a subagent
with the same prefix, and a restart marker. For each configuration a `specmlx serve` of its own (a
process on 127.0.0.1, with a prompt-cache directory of its own, removed afterwards) answers every
turn in order, greedy, streamed; at the marker it is killed (SIGKILL; `--stop term`: SIGTERM) and
started again on the same directory. Every configuration sends the same prompts (the recorded
history); the served model's answer is measured and compared, never fed back.

Configurations (`--configs`, comma-separated; each drafter under the automatic length):
- memory: `--no-disk-cache --drafter none`, today's server: kept prompts in memory only (after its
  restart, the next turn is a cold prefill: the restart goal's yardstick);
- disk: `--drafter none`, the disk cache on (its default);
- disk+0.5b: `--drafter` the `--small-drafter` directory (skipped without one);
- disk+lookup: `--drafter ngram` (prompt lookup);
- disk+suffix: `--drafter suffix` (skipped with a line where the server does not know it).
A server without the disk cache runs every configuration from memory: its from-disk figures read 0.

Printed per configuration and turn: prompt tokens from memory, from disk and prefilled (the
usage's `cache_read_input_tokens` and `disk_read_input_tokens`), time to first token, tok/s and
tokens per round; the session's totals; then the goals: the turn after the restart against the
turn before it and a cold prefill, the subagent's prefill and the parent's next turn, and whether
every configuration's answers equal the first's, turn for turn.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ...cli import run_cli
from ...errors import SpecmlxError
from .messages import Answered, send
from .process import Refused, ServeProcess, serve_help
from .replay_report import Run, figures, report
from .session import SESSION_PATH, Plan, Request, Restart, plan, read_session

SMALL = "<small-drafter>"  # stands for --small-drafter's directory
# The server's drafter names (`drafters.labels`), written out: importing them would load MLX here.
NGRAM, NONE, SUFFIX = "ngram", "none", "suffix"
NO_DISK = "--no-disk-cache"


@dataclass(frozen=True)
class Config:
    """A configuration: the disk cache on or off, and the server's drafter."""

    name: str
    disk: bool
    drafter: str
    optional: bool = False  # a server that refuses it skips it with a line


CONFIGS = {c.name: c for c in (Config("memory", False, NONE), Config("disk", True, NONE),
                               Config("disk+0.5b", True, SMALL), Config("disk+lookup", True, NGRAM),
                               Config("disk+suffix", True, SUFFIX, optional=True))}


def configs_spec(text: str) -> tuple[Config, ...]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in CONFIGS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"configurations are some of {', '.join(CONFIGS)}; got {text!r}")
    return tuple(CONFIGS[name] for name in dict.fromkeys(names))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m specmlx.bench.serve.replay", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n")[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--target", help="the server's --target: a model directory or repo id")
    which.add_argument("--preset", help="the server's --preset (default: the default preset)")
    p.add_argument("--configs", type=configs_spec, default=tuple(CONFIGS.values()), metavar="NAMES",
                   help=f"configurations to run, in order, comma-separated, of {', '.join(CONFIGS)} (default: all)")
    p.add_argument("--small-drafter", type=Path, metavar="DIR", help="the 0.5B drafter's directory for disk+0.5b")
    p.add_argument("--max-tokens", type=int, default=32, help="tokens each turn's answer may take (default 32)")
    p.add_argument("--turns", type=int, metavar="K", help="replay only the first K requests (default: all)")
    p.add_argument("--stop", choices=["kill", "term", "none"], default="kill",
                   help="how the server is stopped at the restart: SIGKILL (a crash) or SIGTERM; none: no restart, "
                   "the yardstick of what the turn after it takes without one (default kill)")
    p.add_argument("--settle", type=float, default=5.0, metavar="S",
                   help="seconds between the last answer and the stop, for the disk cache's write (default 5)")
    p.add_argument("--disk-cache-gb", type=float, metavar="G", help="the server's --disk-cache-gb (default: its own)")
    p.add_argument("--request-timeout", type=float, default=1800.0, metavar="S",
                   help="longest a turn's answer may take, its prefill included (default 1800)")
    p.add_argument("--session", type=Path, default=SESSION_PATH, help="the session (default: the packaged one)")
    p.add_argument("--json", type=Path, help="also write every answer and figure here")
    return p


def server_flags(config: Config, args: argparse.Namespace, has_disk: bool) -> list[str] | str:
    """The server's flags for a configuration, or why it is skipped."""
    drafter = config.drafter
    if drafter == SMALL:
        if args.small_drafter is None or not args.small_drafter.is_dir():
            return f"no --small-drafter directory{f' at {args.small_drafter}' if args.small_drafter else ''}"
        drafter = str(args.small_drafter)
    flags = ["--target", args.target] if args.target else ["--preset", args.preset] if args.preset else []
    flags += ["--drafter", drafter]
    if has_disk and not config.disk:
        flags.append(NO_DISK)
    elif has_disk and args.disk_cache_gb is not None:
        flags += ["--disk-cache-gb", str(args.disk_cache_gb)]
    return flags


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def progress(name: str, a: Answered) -> str:
    return (f"{name} {a.step} ({a.thread}): {a.prompt_tokens} prompt tokens, {a.memory_tokens} from memory, "
            f"{a.disk_tokens} from disk, {a.prefilled} prefilled; first token "
            + ("-" if a.first_s is None else f"{a.first_s:.2f} s") + f", {len(a.tokens)} tokens in {a.wall_s:.1f} s")


def started(server: ServeProcess, name: str) -> tuple[str, float]:
    began = time.perf_counter()
    url = server.start()
    took = time.perf_counter() - began
    say(f"{name}: listening at {url} after {took:.1f} s")
    return url, took


def replay_on(server: ServeProcess, config: Config, flags: list[str], steps: Plan, args) -> Run:
    """The session's requests in order against one server, restarted at each marker."""
    say(f"{config.name}: starting specmlx serve {' '.join(flags)}...")
    url, _ = started(server, config.name)
    answers: list[Answered] = []
    restarts, restart_s = [], []
    for item in steps:  # bounded: the plan's length, each request by --request-timeout
        if isinstance(item, Restart) and args.stop == "none":
            continue
        if isinstance(item, Restart):
            time.sleep(args.settle)
            say(f"{config.name}: restart (SIG{args.stop.upper()})...")
            server.stop(args.stop)
            try:
                url, took = started(server, config.name)
            except Refused as err:  # not a flag it refused: it took them a moment ago
                raise SpecmlxError(f"the server did not start again after the restart: {err}") from None
            restarts.append(len(answers))
            restart_s.append(took)
            continue
        answers.append(send(url, item, args.request_timeout))
        say(progress(config.name, answers[-1]))
    return Run(config.name, tuple(flags), tuple(answers), tuple(restarts), tuple(restart_s))


def run_config(config: Config, flags: list[str], steps: Plan, args) -> Run:
    """One configuration on a server of its own, with a prompt-cache directory of its own; the server's
    output is kept (and named) only when something failed."""
    with tempfile.TemporaryDirectory(prefix="specmlx-replay.") as tmp:
        server = ServeProcess(flags, Path(tmp) / "prompt-cache", Path(tmp) / "serve.log")
        try:
            return replay_on(server, config, flags, steps, args)
        except Refused:
            raise
        except SpecmlxError as err:
            kept = Path(tempfile.mkstemp(prefix="specmlx-replay.", suffix=".log")[1])
            shutil.copyfile(server.log, kept)
            raise SpecmlxError(f"{config.name}: {err} (the server's output: {kept})") from None
        finally:
            server.stop("term")


def replay(args: argparse.Namespace) -> int:
    for name in ("max_tokens", "turns"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise SpecmlxError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    steps = plan(read_session(args.session), args.max_tokens, args.turns)
    has_disk = NO_DISK in serve_help()
    if not has_disk:
        say("note: this specmlx serve has no disk cache: every configuration keeps prompts in memory only, "
            "and the from-disk figures read 0")
    say(f"{sum(isinstance(s, Request) for s in steps)} requests, {sum(isinstance(s, Restart) for s in steps)} "
        f"restart(s), {args.max_tokens} tokens an answer, greedy")
    runs = []
    for config in args.configs:
        flags = server_flags(config, args, has_disk)
        if isinstance(flags, str):
            say(f"{config.name}: skipped: {flags}")
            continue
        try:
            runs.append(run_config(config, flags, steps, args))
        except Refused as err:
            if not config.optional:
                raise SpecmlxError(f"{config.name}: specmlx serve {' '.join(flags)} did not start: {err}") from None
            say(f"{config.name}: skipped: the server refused it ({err})")
    if not runs:
        raise SpecmlxError("no configuration ran")
    print(report(runs))
    if args.json:
        given = {"session": str(args.session), "max_tokens": args.max_tokens, "turns": args.turns,
                 "stop": args.stop, "settle_s": args.settle}
        args.json.write_text(json.dumps(given | figures(runs), indent=1))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_cli("specmlx bench serve replay", lambda: replay(args))


if __name__ == "__main__":
    sys.exit(main())
