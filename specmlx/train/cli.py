"""`specmlx train`: an MTP drafter head for a target, from its own answers or from text.

Two phases, both resumable: the target's hidden states over its answers (or a
corpus) are saved under OUT/features (the slow part), then the head trains on them with
checkpoints under OUT/checkpoint. The finished head is written to OUT, a
drafter directory that `--drafter OUT` loads.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Sequence

import mlx.core as mx
from mlx.utils import tree_flatten

from ..blas import describe
from ..cli import run_cli
from ..models.mtp import MTPConfig, MTPModel, save_mtp
from ..errors import SpecmlxError
from ..loading import display_name
from ..options import Parser, add_model_arguments
from ..presets import default_preset_name
from ..prompting import PromptRow, read_prompts, write_prompts
from .answers import answer_windows
from .curve import Point, load_points, measure, plot, save_points
from .corpus import default_sources, documents, find_files, token_counts, windows
from .features import ANSWER, Features, Window, collect
from .prompts import HELD_OUT_EVERY, generate_prompts, held_out, left_out
from .trainer import (Progress, TrainConfig, Trainer, draft_vocabulary, hidden_rms, start_from_last_layer,
                      start_near_the_target)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="specmlx train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(p)
    p.add_argument("--out", type=Path, required=True, help="output drafter directory")
    p.add_argument("--source", choices=("answers", "text", "mix"), default="answers",
                   help="answers: the target's own greedy answers to --prompts (default); text: --data as "
                   "chat answers; mix: both, --text-share of the tokens from text")
    p.add_argument("--prompts", type=Path, default=None,
                   help="JSONL of {\"prompt\": ...} requests to answer (default: generated from templates and "
                   "the standard library); every %dth is held out" % HELD_OUT_EVERY)
    p.add_argument("--data", type=Path, nargs="*", default=None,
                   help="text files, folders or JSONL (default: Python's standard library sources)")
    p.add_argument("--tokens", type=int, default=200_000, help="tokens to collect hidden states for")
    p.add_argument("--text-share", type=float, default=0.5, help="with --source mix: the share from text")
    p.add_argument("--held-out", type=int, default=48, help="held-out requests answered for validation")
    p.add_argument("--answer-tokens", type=int, default=192, help="longest answer generated per request")
    p.add_argument("--gen-batch", type=int, default=64, help="requests answered at once")
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--train-tokens", type=int, default=None,
                   help="train on only the first N collected tokens (for learning curves; default: all)")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--epochs", type=float, default=None, help="instead of --steps: passes over the training tokens")
    p.add_argument("--batch", type=int, default=4, help="windows per step")
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--intermediate-size", type=int, default=None, help="MLP width (default: the target's)")
    p.add_argument("--init", choices=("identity", "last-layer"), default="identity",
                   help="identity: the head starts as 'the next hidden state is this one' (default); "
                   "last-layer: its decoder layer starts as the target's last")
    p.add_argument("--fused-layers", type=layer_list, default=None, metavar="eagle3|N,N,N",
                   help="EAGLE-3-style input: the head reads a fusion of what enters these target layers (eagle3: "
                   "a low, the middle and a high one) in place of the final hidden state; collection keeps them")
    p.add_argument("--passes", type=int, default=2,
                   help="draft steps unrolled in training, each after the first fed the last one's features")
    p.add_argument("--answer-only", action="store_true", help="leave the requests' tokens out of the loss")
    p.add_argument("--draft-vocab", type=int, default=16384, help="tokens the head can draft (the most frequent)")
    p.add_argument("--vocab-tokens", type=int, default=3_000_000,
                   help="corpus tokens counted to pick the draft vocabulary (tokenizing only)")
    p.add_argument("--checkpoint-every", type=int, default=100, help="steps between checkpoints (each logs held-out agreement)")
    p.add_argument("--quantize", type=int, choices=(0, 4, 8), default=0, help="write the head with N-bit weights")
    p.add_argument("--collect-only", action="store_true", help="stop after saving hidden states")
    p.add_argument("--curve", type=token_list, default=None, metavar="N,N,...",
                   help="a learning curve instead of one head: a head per token count (under OUT/curve), each "
                   "measured by greedy speculative decoding at k=4 on held-out requests; writes OUT/curve.json")
    p.add_argument("--curve-requests", type=int, default=16, help="held-out requests each curve point decodes")
    p.add_argument("--curve-max-tokens", type=int, default=128, help="tokens each of them generates")
    p.add_argument("--plot", type=Path, default=None, help="with --curve: plot it to this PNG (needs matplotlib)")
    p.add_argument("--seed", type=int, default=0)
    return p


def token_list(text: str) -> list[int]:
    try:
        values = sorted({int(v.replace("_", "").lower().replace("k", "000")) for v in text.split(",") if v.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected token counts like 25000,100k: {text!r}") from None
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"expected positive token counts: {text!r}")
    return values


def layer_list(text: str) -> str | tuple[int, ...]:
    if text.strip() == "eagle3":
        return "eagle3"
    try:
        layers = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected eagle3 or layer numbers like 2,12,21: {text!r}") from None
    if list(layers) != sorted(set(layers)) or layers[0] < 0:
        raise argparse.ArgumentTypeError(f"expected ascending layer numbers: {text!r}")
    return layers


def fused_layers(args: argparse.Namespace, target) -> tuple[int, ...]:
    """The layers the head fuses (none: it reads the final hidden state), checked against the target."""
    from ..hidden import eagle3_layers, text_model

    count = len(text_model(target).layers)
    layers = eagle3_layers(count) if args.fused_layers == "eagle3" else tuple(args.fused_layers or ())
    if layers and (list(layers) != sorted(set(layers)) or layers[0] < 0 or layers[-1] >= count):
        raise SpecmlxError(f"--fused-layers {','.join(map(str, layers))}: the target has {count} layers "
                           f"(0 to {count - 1}), and the layers must ascend")
    return layers


def head_config(target, args, vocab: int) -> MTPConfig:
    a = target.args
    return MTPConfig(
        target_hidden_size=a.hidden_size, target_vocab_size=vocab, hidden_size=a.hidden_size,
        intermediate_size=args.intermediate_size or a.intermediate_size,
        num_attention_heads=a.num_attention_heads, num_key_value_heads=a.num_key_value_heads,
        num_layers=args.layers, draft_vocab_size=min(args.draft_vocab, vocab),
        rms_norm_eps=a.rms_norm_eps, rope_theta=float(getattr(a, "rope_theta", 1e6)),
        target_model_type=a.model_type, fused_layers=fused_layers(args, target),
    )


GENERATED_REQUESTS = 20_000  # more than any collection here answers


def requests_of(args: argparse.Namespace) -> list[PromptRow]:
    """The requests, fixed by the first run in OUT/features/requests.jsonl: a resumed
    collection and the held-out split must see the same list, whatever changes meanwhile."""
    saved = Features(args.out / "features").requests
    if saved.exists():
        return read_prompts(saved)
    if args.prompts:
        requests = read_prompts(args.prompts)
    else:
        # The bench's prompts are never trained on, even where a template would repeat one.
        requests = generate_prompts(GENERATED_REQUESTS, seed=args.seed, exclude=left_out())
    write_prompts(requests, saved)
    return requests


def collect_features(args: argparse.Namespace, target, files: list[Path]) -> Features:
    """Held-out answers first, then the training sources; each folder resumes by itself."""
    folders = Features(args.out / "features")
    model, tokenizer = target.model, target.tokenizer
    requests = requests_of(args)
    held = [r for i, r in enumerate(requests) if held_out(i)][: args.held_out]
    train = [r for i, r in enumerate(requests) if not held_out(i)]

    taps = fused_layers(args, model)

    def answered(reqs: list[PromptRow]):
        return answer_windows(model, tokenizer, reqs, args.seq_len, args.answer_tokens, args.gen_batch,
                              tokenizer.eos_token_ids, taps)

    def text(skip: int):
        stream = windows(tokenizer, documents(files, seed=args.seed), args.seq_len)
        return (Window(w, [ANSWER] * len(w)) for w in itertools.islice(stream, skip, None))

    collect(model, answered(held), folders.held_out, len(held) * args.seq_len, desc="held-out answers",
            taps=taps)
    share = {"answers": 0.0, "text": 1.0, "mix": args.text_share}[args.source]
    if share < 1:
        collect(model, answered(train), folders.answers, round(args.tokens * (1 - share)), desc="target answers",
                taps=taps)
    if share > 0:
        collect(model, text, folders.text, round(args.tokens * share), desc="text hidden states",
                taps=taps)
    return folders


def run(args: argparse.Namespace) -> int:
    from ..hidden import check_exposes_hidden
    from ..loading import load_models

    if args.steps < 1 or args.tokens < args.seq_len or args.batch < 1 or args.answer_tokens >= args.seq_len:
        raise SpecmlxError("need --steps >= 1, --batch >= 1, --tokens >= --seq-len and --answer-tokens < --seq-len")
    if not 0 <= args.text_share <= 1:
        raise SpecmlxError("--text-share must be between 0 and 1")
    positive = {"--checkpoint-every": args.checkpoint_every, "--passes": args.passes, "--gen-batch": args.gen_batch,
                "--answer-tokens": args.answer_tokens, "--held-out": args.held_out,
                "--curve-requests": args.curve_requests, "--curve-max-tokens": args.curve_max_tokens}
    for name, value in positive.items():
        if value < 1:
            raise SpecmlxError(f"{name} must be at least 1")
    if args.epochs is not None and args.epochs <= 0:
        raise SpecmlxError("--epochs must be positive")
    if args.plot and not args.curve:
        raise SpecmlxError("--plot draws the learning curve: give --curve too")
    if args.plot:
        try:
            import matplotlib  # noqa: F401  (before hours of training, not after)
        except ImportError:
            raise SpecmlxError("--plot needs matplotlib (pip install -e \".[bench]\")") from None
    files = find_files(args.data or default_sources()) if args.source != "answers" or args.data else []
    target = load_models(args.target, []).target
    check_exposes_hidden(target.model)
    print(f"backend: {mx.default_device()}, BLAS: {describe()}; source: {args.source}")
    folders = collect_features(args, target, files)
    print(f"hidden states: {folders.describe()}")
    if args.collect_only:
        return 0
    # Tokenizing is cheap, so the draft vocabulary also sees far more text than the target
    # answered: tokens the collection never met can still be drafted.
    text = token_counts(target.tokenizer, documents(files or find_files(default_sources()), seed=args.seed + 1),
                        args.vocab_tokens)
    if args.curve:
        return learning_curve(args, target, folders, text)
    report = train_head(args, target, folders, text, args.train_tokens, args.out)
    held = report["held_out"]
    print(f"held-out agreement: first token {held['accept_1']:.3f}, later tokens {held['accept_2']:.3f}, "
          f"about {held['mean_accepted_4']:.2f} tokens per round at 4 drafts")
    print(f"drafter written to {args.out}: use --drafter {args.out}")
    return 0


def train_head(args: argparse.Namespace, target, folders: Features, text: Counter[int], limit: int | None,
               out: Path) -> dict:
    """Train one head on the first `limit` collected tokens into `out`; its report."""
    from ..vocab import vocab_size

    train_set = folders.training(limit, args.source, args.text_share)
    if len(train_set.shards) < 2:
        raise SpecmlxError("too little data: need at least two shards of hidden states")
    vocab = vocab_size(target.model)
    config = head_config(target.model, args, vocab)
    mx.random.seed(args.seed)
    head = MTPModel(config)
    counts = train_set.token_counts()
    scale = sum(counts.values()) / max(sum(text.values()), 1)  # the text weighs no more than the collection
    counts.update({t: max(1, round(c * scale)) for t, c in text.items()})
    head.set_draft_ids(draft_vocabulary(counts, config.draft_vocab_size, tuple(target.tokenizer.eos_token_ids)))
    rms = hidden_rms(folders.held_out)
    if args.init == "last-layer":
        start_from_last_layer(head, target.model, rms)
    else:
        start_near_the_target(head, rms)
    size = sum(v.size for _, v in tree_flatten(head.trainable_parameters()))
    steps = args.steps if args.epochs is None else max(1, round(args.epochs * train_set.windows / args.batch))
    print(f"head: {size / 1e6:.1f}M trained parameters + {config.draft_vocab_size} rows of the target's head; "
          f"{steps} steps on {train_set.tokens:,} tokens")
    trainer = Trainer(head, target.model, train_set, folders.held_out, out,
                      TrainConfig(steps=steps, batch=args.batch, lr=args.lr, seed=args.seed,
                                  warmup=max(1, min(50, steps // 10)), checkpoint_every=args.checkpoint_every,
                                  passes=args.passes, answer_only=args.answer_only))
    last = trainer.train()
    held = trainer.validate()
    save_mtp(head, out, {"bits": args.quantize, "group_size": 64} if args.quantize else None)
    report = {"train": _summary(last), "held_out": _summary(held), "tokens": train_set.tokens,
              "source": args.source, "init": args.init, "steps": trainer.step,
              "fused_layers": list(config.fused_layers), "passes": args.passes, "answer_only": args.answer_only}
    (out / "training.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


# What a curve's points depend on besides their token counts: a resumed curve must match them.
CURVE_SETTINGS = ("target", "source", "text_share", "seq_len", "answer_tokens", "steps", "epochs", "batch", "lr",
                  "layers", "intermediate_size", "init", "draft_vocab", "vocab_tokens", "quantize",
                  "curve_requests", "curve_max_tokens", "seed", "fused_layers", "passes", "answer_only")


def learning_curve(args: argparse.Namespace, target, folders: Features, text: Counter[int]) -> int:
    """A head per point of --curve, each measured by the engine on held-out requests; resumes by point."""
    requests = [r for i, r in enumerate(requests_of(args)) if held_out(i)][: args.curve_requests]
    path = args.out / "curve.json"
    available = folders.training(source=args.source, text_share=args.text_share).tokens
    limits = sorted({min(wanted, available) for wanted in args.curve})  # past the collection: all of it, once
    settings = json.loads(json.dumps({k: getattr(args, k) for k in CURVE_SETTINGS}))  # as curve.json keeps them
    settings["prompts"] = str(args.prompts) if args.prompts else None
    points = [p for p in load_points(path, settings) if p.limit in limits]
    for limit in limits:
        if any(p.limit == limit for p in points):
            continue  # measured by an earlier run
        out = args.out / "curve" / str(limit)
        report = train_head(args, target, folders, text, limit, out)
        accepted, rate, generated = measure(target, out, requests, args.curve_max_tokens)
        points.append(Point(limit, report["tokens"], report["steps"], accepted, rate,
                            report["held_out"]["accept_1"], report["held_out"]["accept_2"], 4, len(requests),
                            generated))
        points.sort(key=lambda p: p.limit)
        save_points(points, settings, path)
        print(f"{report['tokens']:,} tokens: mean accepted length {accepted:.2f} at k=4 "
              f"(acceptance {rate:.2f}) on {len(requests)} held-out requests")
    if args.plot and points:
        plot(points, args.plot, f"MTP head for {display_name(args.target or default_preset_name())}")
        print(f"plot written to {args.plot}")
    return 0


def _summary(p: Progress) -> dict:
    return {"step": p.step, "loss": p.loss, "accept_1": p.accept_1, "accept_2": p.accept_2,
            "mean_accepted_4": p.mean_accepted}


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("specmlx train", lambda: run(build_parser().parse_args(argv)))
