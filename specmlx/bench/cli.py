"""Benchmark the target alone, mlx-lm's speculative decoding and specmlx.

All modes run in one process, interleaved prompt by prompt. Prints a markdown
table; --json and --plot write the full results. Each row's headline is the
median of its per-prompt speed-ups over the target alone (the same prompt and
temperature), with the lowest and highest; the total's ratio stands beside it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

from ..cli import run_cli
from ..distributed import Group
from ..distributed.cli import add_arguments as add_distributed_arguments, joined, leads, placement
from ..distributed.load import AUTO
from ..distributed.watchdog import PEER_TIMEOUT
from ..errors import SpecmlxError
from ..caches.kinds import KVBits
from ..kv_flags import add_kv_arguments
from ..options import Parser, add_model_arguments, kv_bits
from ..presets import default_preset_name, get_preset
from ..prompting import (EncodedPrompt, encode_prompts, has_chat_template, packaged_prompts_path,
                         read_prompts)
from ..sampling import SamplingParams
from . import plot
from .calibrate import Calibration, calibrate, pooled, rows_used, time_forwards, with_rows
from .driver import RunSettings, run_all
from .kinds import by_kind, kinds_table
from .lineup import Lineup, drafter_specs, load_lineup, split_variant
from .machine import describe_machine
from .plan import MODES, RunSpec, plan_runs
from .report import document, render, write_json
from .runs import Measurement
from .sharded import render_sharded, sharded_figures, sharded_options
from .skeleton import HEAD_DIM, SELF, Skeleton, describe as describe_skeleton, skeleton_specs
from .summary import summarize

PROG = "specmlx bench"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser, preset="a preset: its target, its drafter and ngram (default: the default preset)",
                        repeat=True, drafter="repeatable or comma-separated; variants by a draft policy suffix: "
                        "+auto (draft length chosen each round), +k=N, +adaptive, +pmin=P, +lookup=N, combined "
                        "as in mtp+k=4+pmin=0.5 (default: the target's drafter and ngram, each also +auto)")
    parser.add_argument("--prompts", type=Path, default=packaged_prompts_path(), metavar="FILE",
                        help="JSONL file of {id, kind, prompt}, each optionally with prediction, schema or tools "
                        "(default: %(default)s)")
    parser.add_argument("--limit", type=int, metavar="N", help="use only the first N prompts")
    parser.add_argument("--max-tokens", type=int, default=128, metavar="N", help="tokens per generation (default 128)")
    parser.add_argument("--temps", default="0,0.7", metavar="LIST", help="temperatures, comma-separated (default 0,0.7)")
    parser.add_argument("--num-draft", default="1,2,4,6,8", metavar="LIST",
                        help="draft lengths k, comma-separated (default 1,2,4,6,8)")
    parser.add_argument("--modes", default=",".join(MODES), metavar="LIST",
                        help="which modes to run, comma-separated (default %(default)s); e.g. "
                        "mlx-lm-spec,specmlx compares acceptance without the slow target runs")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="prompt i samples with seed + i (default 0)")
    parser.add_argument("--profile", action="store_true",
                        help="a second specmlx pass per run, profiled, for the draft/verify time split")
    parser.add_argument("--calibration-steps", type=int, default=5, metavar="N",
                        help="timed single-token steps for the cost ratio c (default 5; 0 skips "
                        "the calibration and the predicted speed-ups)")
    parser.add_argument("--warmup-tokens", type=int, default=8, metavar="N",
                        help="first run the whole plan once, untimed, on the first prompt with N "
                        "tokens (default 8; 0 skips it)")
    parser.add_argument("--skeleton", type=int, nargs="?", const=HEAD_DIM, metavar="HEAD_DIM",
                        help="the users' regime on this machine: every model rebuilt with its real layers, heads, "
                        f"vocabulary and tokenizer, random weights, hidden = heads x HEAD_DIM (default {HEAD_DIM}); "
                        f"reads the fetched models' configs, downloads nothing. Adds the drafter '{SELF}' "
                        "(the target's own skeleton: agrees at T=0, costs a target step)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the results as JSON")
    parser.add_argument("--plot", type=Path, metavar="OUT.png",
                        help="plot speed-up against draft length (needs matplotlib)")
    add_kv_arguments(parser)  # every mode's target then keeps them so, the baseline included
    add_distributed_arguments(parser)
    return parser


@dataclass(frozen=True)
class Options:
    target: str
    drafters: tuple[str, ...]  # as given; resolved by lineup.drafter_specs
    prompts: Path
    limit: int | None
    max_tokens: int
    temps: tuple[float, ...]
    num_drafts: tuple[int, ...]
    modes: tuple[str, ...]
    seed: int
    profile: bool
    calibration_steps: int
    warmup_tokens: int
    json: Path | None
    plot: Path | None
    skeleton: int | None = None  # a skeleton's head dim; None: the real weights
    distributed: bool = False
    sharding: str = AUTO
    peer_timeout: float = PEER_TIMEOUT
    kv: KVBits | None = None  # the target's keys and values quantized in every mode (`--kv-bits`)


def _split(value: str, flag: str) -> list[str]:
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if not parts:
        raise SpecmlxError(f"{flag}: give at least one value, e.g. {flag} 0,0.7")
    return list(dict.fromkeys(parts))


def parse_temps(value: str) -> tuple[float, ...]:
    temps = []
    for part in _split(value, "--temps"):
        try:
            temp = float(part)
        except ValueError:
            raise SpecmlxError(f"--temps: {part!r} is not a number") from None
        SamplingParams(temp=temp)  # the engine's own check, with its message
        temps.append(temp)
    return tuple(temps)


def parse_num_drafts(value: str) -> tuple[int, ...]:
    ks = []
    for part in _split(value, "--num-draft"):
        try:
            k = int(part)
        except ValueError:
            raise SpecmlxError(f"--num-draft: {part!r} is not a whole number") from None
        if k < 1:
            raise SpecmlxError(f"--num-draft: draft lengths must be >= 1, got {k}")
        ks.append(k)
    return tuple(ks)


def parse_modes(value: str) -> tuple[str, ...]:
    modes = _split(value, "--modes")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise SpecmlxError(f"--modes: unknown mode {unknown[0]!r}; choose from {', '.join(MODES)}")
    return tuple(modes)


def parse_options(args: argparse.Namespace) -> Options:
    for flag, value, low in (("--max-tokens", args.max_tokens, 1), ("--limit", args.limit, 1),
                             ("--calibration-steps", args.calibration_steps, 0),
                             ("--warmup-tokens", args.warmup_tokens, 0)):
        if value is not None and value < low:
            raise SpecmlxError(f"{flag} must be >= {low}, got {value}")
    if args.skeleton is not None:
        check_skeleton(args.skeleton, args.distributed)
    if args.preset is not None:
        get_preset(args.preset)  # an unknown name fails here, listing the known ones
    return Options(
        target=args.target or args.preset or default_preset_name(),
        drafters=tuple(args.drafter), prompts=args.prompts, limit=args.limit,
        max_tokens=args.max_tokens, temps=parse_temps(args.temps),
        num_drafts=parse_num_drafts(args.num_draft), modes=parse_modes(args.modes), seed=args.seed, profile=args.profile,
        calibration_steps=args.calibration_steps, warmup_tokens=args.warmup_tokens,
        json=args.json, plot=args.plot, skeleton=args.skeleton, distributed=args.distributed,
        sharding=args.sharding, peer_timeout=args.peer_timeout, kv=kv_bits(args),
    )


def check_skeleton(head_dim: int, distributed: bool) -> None:
    if head_dim < 2 or head_dim % 2:
        raise SpecmlxError(f"--skeleton: the head dim must be even and >= 2 (rotary embeddings), got {head_dim}")
    if distributed:
        raise SpecmlxError("--skeleton runs in one process: leave out --distributed")


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("specmlx bench", lambda: bench(parse_options(build_parser().parse_args(argv))))


def quiet(message: str) -> None:
    """The log of a rank that follows: rank 0 alone speaks."""


def log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def check_writable(path: Path | None, flag: str) -> None:
    """Fail now, not after an hour of runs, when an output file cannot be written."""
    if path is not None and not path.resolve().parent.is_dir():
        raise SpecmlxError(f"{flag}: {path.parent} is not a directory")


def bench(options: Options) -> int:
    with joined(options) as group:
        return bench_on(options, group)


def bench_on(options: Options, group: Group | None) -> int:
    """The bench on one process, or on every rank of a sharded target: each rank
    runs the same plan in the same order; rank 0 alone logs, prints and writes."""
    prepared = prepare(options, group, log if leads(group) else quiet)
    measurements, calibration = measure(prepared, group)
    if group is None and calibration is not None:
        prepared = replace(prepared, calibration=time_widths(replace(prepared, calibration=calibration), measurements))
    if group is not None:  # every rank measures; rank 0 reports
        figures = sharded_figures(group, prepared.lineup, measurements)
        prepared = replace(prepared, config=prepared.config | {"distributed": figures})
    if leads(group):
        report(prepared, measurements, group)
    return 0


@dataclass(frozen=True)
class Prepared:
    """What a bench runs, prepared alike on every rank."""

    options: Options  # as a sharded bench can run them
    lineup: Lineup
    prompts: list[EncodedPrompt]
    plan: list[RunSpec]
    settings: RunSettings
    calibration: Calibration | None
    machine: dict
    config: dict  # `describe_config`'s, and with ranks what they measured (`sharded_figures`)
    kinds: dict[str, str]  # each prompt's kind by its id


def prepare(options: Options, group: Group | None, say: Callable[[str], None]) -> Prepared:
    """Check the output files, read the prompts (rank 0) and load the lineup; the prompts
    reach every rank as tokens. Then calibrate and plan the runs."""
    if leads(group):  # rank 0 alone reads the prompts and writes: the others need neither file
        if options.plot is not None:
            plot.require()
        check_writable(options.json, "--json")
        check_writable(options.plot, "--plot")
        rows = read_prompts(options.prompts, options.limit)
    lineup = load(options, group, say)
    chat = has_chat_template(lineup.target.tokenizer)
    if not chat:
        say("the target's tokenizer has no chat template: prompts are used as plain text")
    prompts = encode_prompts(rows, lineup.target.tokenizer, chat) if leads(group) else None
    if lineup.lockstep is not None:
        prompts = [EncodedPrompt(p["id"], p["kind"], tuple(p["tokens"]), tuple(p["prediction"]), p["schema"])
                   for p in lineup.lockstep.shared(None if prompts is None else [asdict(p) for p in prompts])]
    machine = describe_machine()
    if group is not None:
        options = sharded_options(options, say)
    calibration = measure_costs(options, lineup, prompts, say) if options.calibration_steps else None
    plan = plan_runs(lineup.entrants, options.temps, options.num_drafts, options.modes)
    if not plan:
        raise SpecmlxError(f"--modes {','.join(options.modes)}: nothing to run with these drafters")
    settings = RunSettings(options.max_tokens, options.seed, options.profile,
                           min(options.warmup_tokens, options.max_tokens), options.kv)
    return Prepared(options, lineup, prompts, plan, settings, calibration, machine,
                    describe_config(options, lineup, prompts, chat), {p.id: p.kind for p in prompts})


def load(options: Options, group: Group | None, say: Callable[[str], None]) -> Lineup:
    """The target and drafters: their weights, or with --skeleton their skeletons."""
    specs = drafter_specs(options.target, options.drafters)
    if options.skeleton is not None:
        return load_lineup(options.target, skeleton_specs(options.target, specs), say, Skeleton(options.skeleton))
    if any(split_variant(spec)[0] == SELF for spec in specs):
        raise SpecmlxError(f"--drafter {SELF}: the target's own weights draft only with --skeleton")
    return load_lineup(options.target, specs, say, placement(options, group))


def measure_costs(options: Options, lineup: Lineup, prompts: list[EncodedPrompt],
                  say: Callable[[str], None]) -> Calibration:
    """The cost ratios the predicted speed-ups need, timed on the first prompt."""
    say(f"calibrating: {options.calibration_steps} single-token steps of each model")
    drafters = {e.name: e.drafter for e in lineup.entrants}
    verify_rows = [k + 1 for e in lineup.entrants for k in e.draft_lengths(options.num_drafts) if k]
    return calibrate(lineup.target.model, drafters, prompts[0].tokens, options.calibration_steps, verify_rows,
                     options.kv)


def time_widths(prepared: Prepared, measurements: list[Measurement]) -> Calibration:
    """The calibration with the target's forward at every verify width the rounds used, for their host work."""
    rows = rows_used(m.drafted_histogram for m in measurements)
    return with_rows(prepared.calibration, prepared.lineup.target.model, prepared.prompts[0].tokens, rows, log,
                     prepared.options.kv)


def measure(prepared: Prepared, group: Group | None) -> tuple[list[Measurement], Calibration | None]:
    """Every run of the plan on every prompt; rank 0 rewrites the JSON after each prompt. With
    --skeleton, whose steps take milliseconds on a drifting machine, the forwards are timed again
    after each prompt (at the widths used so far) and pooled: the calibration it returns."""
    calibrations = [] if prepared.calibration is None else [prepared.calibration]
    retime = bool(calibrations) and prepared.options.skeleton is not None
    drafters = {e.name: e.drafter for e in prepared.lineup.entrants}

    def prompt_done(measurements: list[Measurement]) -> None:
        if retime:
            rows = rows_used(m.drafted_histogram for m in measurements)
            calibrations.append(time_forwards(prepared.calibration, prepared.lineup.target.model, drafters,
                                              prepared.prompts[0].tokens, rows, prepared.options.kv))
        if prepared.options.json is not None and leads(group):
            write_results(replace(prepared, calibration=pooled(calibrations) if calibrations else None), measurements)

    measurements = run_all(prepared.lineup, prepared.prompts, prepared.plan, prepared.settings, prompt_done,
                           show=leads(group))
    return measurements, pooled(calibrations) if calibrations else None


def write_results(prepared: Prepared, measurements: list[Measurement]) -> None:
    """The JSON so far, rewritten after each prompt: a long run that dies keeps what it measured."""
    done = len({m.prompt_id for m in measurements})
    calibration = prepared.calibration
    doc = document(summarize(measurements, calibration), measurements, prepared.machine, prepared.config, calibration)
    per_kind = [row.to_dict() for row in by_kind(measurements, prepared.kinds)]
    write_json(prepared.options.json, doc | {"by_kind": per_kind, "prompts_done": done})


def report(prepared: Prepared, measurements: list[Measurement], group: Group | None) -> None:
    """Rank 0's tables, then the JSON and the plot where asked for."""
    options, machine = prepared.options, prepared.machine
    results = summarize(measurements, prepared.calibration)
    print(render(results, machine, prepared.config, prepared.calibration))
    if table := kinds_table(by_kind(measurements, prepared.kinds)):
        print(f"\nper kind of prompt (tokens per round; × the target alone on the same kind's prompts):\n\n{table}")
    if group is not None:
        print(render_sharded(prepared.config["distributed"]))
    if options.json is not None:
        write_results(prepared, measurements)
        log(f"wrote {options.json}")
    if options.plot is not None:
        title = f"{Path(options.target).name} · {machine['backend']} · {machine['blas'].split(' (')[0]}"
        plot.write_plot(results, options.plot, title)
        log(f"wrote {options.plot}")


def describe_config(options: Options, lineup: Lineup, prompts: list[EncodedPrompt], chat: bool) -> dict:
    """What was run, for the report and the JSON file."""
    return {
        "target": options.target, "target_path": str(lineup.target.path),
        "drafters": [e.name for e in lineup.entrants],
        "drafter_specs": {e.name: e.spec for e in lineup.entrants},
        "prompts_file": str(options.prompts), "prompts": len(prompts), "prompt_ids": [p.id for p in prompts],
        "chat_template": chat, "max_tokens": options.max_tokens, "temps": list(options.temps),
        "num_draft": list(options.num_drafts), "modes": list(options.modes), "seed": options.seed, "profile": options.profile,
        "calibration_steps": options.calibration_steps, "warmup_tokens": options.warmup_tokens,
        "kv_bits": None if options.kv is None else asdict(options.kv),
        "skeleton": None if options.skeleton is None else describe_skeleton(
            lineup.target, [e.drafter for e in lineup.entrants], options.skeleton),
    }
