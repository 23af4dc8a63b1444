"""`specmlx train`: an MTP drafter head for a target, from text.

Two phases, both resumable: the target's hidden states over the corpus are
saved under OUT/features (the slow part), then the head trains on them with
checkpoints under OUT/checkpoint. The finished head is written to OUT, a
drafter directory that `--drafter OUT` loads.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Sequence

import mlx.core as mx
from mlx.utils import tree_flatten

from ..blas import describe
from ..models.mtp import MTPConfig, MTPModel, save_mtp
from ..errors import SpecmlxError, run_cli
from ..presets import default_preset_name
from .corpus import default_sources, documents, find_files, token_counts, windows
from .features import collect, shard_count
from .trainer import (Progress, TrainConfig, Trainer, draft_vocabulary, hidden_rms, shard_token_counts,
                      start_near_the_target)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specmlx train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default=None, help="target: preset name or model directory (default: the default preset)")
    p.add_argument("--data", type=Path, nargs="*", default=None,
                   help="text files, folders or JSONL (default: Python's standard library sources)")
    p.add_argument("--out", type=Path, required=True, help="output drafter directory")
    p.add_argument("--tokens", type=int, default=200_000, help="corpus tokens to collect hidden states for")
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch", type=int, default=4, help="windows per step")
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--intermediate-size", type=int, default=None, help="MLP width (default: the target's)")
    p.add_argument("--draft-vocab", type=int, default=16384, help="tokens the head can draft (the most frequent)")
    p.add_argument("--vocab-tokens", type=int, default=3_000_000,
                   help="corpus tokens counted to pick the draft vocabulary (tokenizing only)")
    p.add_argument("--collect-only", action="store_true", help="stop after saving hidden states")
    p.add_argument("--seed", type=int, default=0)
    return p


def head_config(target, args, vocab: int) -> MTPConfig:
    a = target.args
    return MTPConfig(
        target_hidden_size=a.hidden_size, target_vocab_size=vocab, hidden_size=a.hidden_size,
        intermediate_size=args.intermediate_size or a.intermediate_size,
        num_attention_heads=a.num_attention_heads, num_key_value_heads=a.num_key_value_heads,
        num_layers=args.layers, draft_vocab_size=min(args.draft_vocab, vocab),
        rms_norm_eps=a.rms_norm_eps, rope_theta=float(getattr(a, "rope_theta", 1e6)),
        target_model_type=a.model_type,
    )


def run(args: argparse.Namespace) -> int:
    from ..hidden import check_exposes_hidden
    from ..loading import load
    from ..vocab import vocab_size

    if args.steps < 1 or args.tokens < args.seq_len or args.batch < 1:
        raise SpecmlxError("need --steps >= 1, --batch >= 1 and --tokens >= --seq-len")
    files = find_files(args.data or default_sources())
    target = load(args.target or default_preset_name())
    check_exposes_hidden(target.model)
    print(f"backend: {mx.default_device()}, BLAS: {describe()}; corpus: {len(files)} files")
    features = args.out / "features"
    stream = windows(target.tokenizer, documents(files, seed=args.seed), args.seq_len)
    shards = collect(target.model, stream, features, args.tokens)
    print(f"hidden states: {shard_count(features)} shards in {features}")
    if args.collect_only:
        return 0
    if shards < 2:
        raise SpecmlxError("the corpus is too small: need at least two shards of hidden states")
    vocab = vocab_size(target.model)
    config = head_config(target.model, args, vocab)
    mx.random.seed(args.seed)
    head = MTPModel(config)
    counts = token_counts(target.tokenizer, documents(files, seed=args.seed + 1), args.vocab_tokens)
    counts.update(shard_token_counts(features))
    head.set_draft_ids(draft_vocabulary(counts, config.draft_vocab_size, tuple(target.tokenizer.eos_token_ids)))
    start_near_the_target(head, hidden_rms(features))
    size = sum(v.size for _, v in tree_flatten(head.trainable_parameters()))
    print(f"head: {size / 1e6:.1f}M trained parameters + {config.draft_vocab_size} rows of the target's head")
    trainer = Trainer(head, target.model, features, args.out,
                      TrainConfig(steps=args.steps, batch=args.batch, lr=args.lr, seed=args.seed,
                                  warmup=max(1, min(50, args.steps // 10))))
    last = trainer.train()
    held_out = trainer.validate()
    save_mtp(head, args.out)
    report = {"train": _summary(last), "held_out": _summary(held_out), "tokens": shard_count(features)}
    (args.out / "training.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"held-out agreement: first token {held_out.accept_1:.3f}, later tokens {held_out.accept_2:.3f}, "
          f"about {held_out.mean_accepted:.2f} tokens per round at 4 drafts")
    print(f"drafter written to {args.out}: use --drafter {args.out}")
    return 0


def _summary(p: Progress) -> dict:
    return {"step": p.step, "loss": p.loss, "accept_1": p.accept_1, "accept_2": p.accept_2,
            "mean_accepted_4": p.mean_accepted}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_cli("specmlx train", lambda: run(args))
