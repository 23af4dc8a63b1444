"""The flags the command lines share, and what they become.

`specmlx generate`, `serve`, `bench` and `train` name a target, drafters, a
draft policy and sampling the same way; each adds its own flags beside these.
Their usage errors, like every other error, are one line and exit code 2:
`Parser` raises them as SpecmlxError for `run_cli` to print.
"""

from __future__ import annotations

import argparse

from .caches.kinds import KVBits
from .errors import SpecmlxError
from .loading import MODEL_DRAFTERS
from .policy import AUTO, START_DRAFT, DraftPolicy, part
from .sampling import SamplingParams

# DraftPolicy's field -> the flag that sets it, besides --num-draft.
DRAFT_FLAGS = {"max_draft": "max_draft", "adaptive": "adaptive", "p_min": "draft_p_min", "lookup": "lookup",
               "lookup_draft": "lookup_draft"}


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, like every other error here."""

    def error(self, message: str):
        raise SpecmlxError(message)


def add_model_arguments(parser: argparse.ArgumentParser, drafter: str | None = None, repeat: bool = False,
                        preset: str | None = None) -> None:
    """--target; with their help, --drafter (repeatable with `repeat`) and --preset (instead of --target)."""
    which = parser.add_mutually_exclusive_group() if preset else parser
    if preset:
        which.add_argument("--preset", metavar="NAME", help=preset)
    which.add_argument("--target", metavar="MODEL", help="target: a preset name, model directory or Hugging Face "
                       "repo id" + ("" if preset else " (default: the default preset)"))
    if drafter:
        parser.add_argument("--drafter", metavar="SPEC", help=f"drafter: {MODEL_DRAFTERS}; {drafter}",
                            **({"action": "append", "default": []} if repeat else {}))


def add_draft_arguments(parser: argparse.ArgumentParser, per_request: bool = False) -> None:
    """The draft policy's flags: --num-draft in `DraftPolicy`'s grammar, and a flag for each
    of its other parts. `per_request`: they are a server's defaults, which a request may change."""
    unless = " when a request does not say" if per_request else ""
    parser.add_argument("--num-draft", default=None, metavar="K|auto",
                        help=f"tokens drafted per round{unless}, or auto (the default; {START_DRAFT} with --adaptive): "
                        "each round drafts what measured costs and acceptance say is fastest, 0 (plain decoding) "
                        "included; with auto, a seeded sampled run repeats its distribution, not its text (a fixed "
                        "K repeats the text). May name the other parts too, e.g. 4+adaptive+pmin=0.5 (max=K, "
                        "lookup=N, lookup-draft=K)")
    parser.add_argument("--max-draft", type=int, default=16, metavar="K",
                        help="longest draft of auto and --adaptive (default 16; past 8 only a block drafter drafts)")
    parser.add_argument("--adaptive", action="store_true",
                        help=f"tune the draft length to the acceptance history, from --num-draft (default {START_DRAFT}) "
                        "up to --max-draft")
    parser.add_argument("--draft-p-min", type=float, default=0.0, metavar="P",
                        help="stop a round's draft after a step where the drafter's top probability "
                        "is below P; --num-draft is then a cap (default 0: always draft --num-draft)")
    parser.add_argument("--lookup", type=int, default=0, metavar="N",
                        help=f"before drafting{unless}, look for the last N or more tokens earlier in the "
                        "context and propose what followed them (free drafts when the answer copies the prompt; "
                        "default 0: off; e.g. 3)")
    parser.add_argument("--lookup-draft", type=int, default=8, metavar="K",
                        help="tokens proposed by a lookup (default 8)")


def draft_policy(args: argparse.Namespace) -> DraftPolicy:
    """The policy of --num-draft and the other draft flags. The flags are parts of one text
    (`--num-draft auto --adaptive` is `auto+adaptive`), so whatever clashes is refused in
    `DraftPolicy`'s words, as the same text is from the bench or a request."""
    default = DraftPolicy()
    flags = [part(name, getattr(args, flag)) for name, flag in DRAFT_FLAGS.items()
             if getattr(args, flag) != getattr(default, name)]
    return DraftPolicy.parse("+".join([str(num_draft(args)), *flags]))


def num_draft(args: argparse.Namespace) -> str:
    """--num-draft as given; when not, the automatic length, which beat every fixed default on a
    CPU and on a GPU (docs/benchmarks.md), or with --adaptive, where that one starts."""
    if args.num_draft is not None:
        return args.num_draft
    return str(START_DRAFT) if getattr(args, "adaptive", False) else AUTO


def add_sampling_arguments(parser: argparse.ArgumentParser, per_request: bool = False) -> None:
    """--temp, --top-p, --top-k, --min-p and, for one generation (not `per_request`), --seed."""
    unless = " when a request does not say" if per_request else ""
    parser.add_argument("--temp", type=float, default=0.0, metavar="T", help=f"temperature{unless}; 0 is greedy (default)")
    parser.add_argument("--top-p", type=float, default=1.0, metavar="P", help=f"nucleus sampling{unless} (default 1: off)")
    parser.add_argument("--top-k", type=int, default=0, metavar="K", help=f"sample from the K likeliest{unless} (default 0: off)")
    parser.add_argument("--min-p", type=float, default=0.0, metavar="P",
                        help=f"drop tokens below P times the likeliest's probability{unless} (default 0: off)")
    if not per_request:
        parser.add_argument("--seed", type=int, metavar="S", help="make sampling reproducible: 0 to 2^64-1 (-1: a random seed)")


def sampling_params(args: argparse.Namespace) -> SamplingParams:
    return SamplingParams(args.temp, args.top_p, args.top_k, args.min_p)


def kv_bits(args: argparse.Namespace) -> KVBits | None:
    """What --kv-bits and --kv-group-size ask for (None: keys and values as the weights are)."""
    return None if args.kv_bits is None else KVBits(args.kv_bits, args.kv_group_size)
