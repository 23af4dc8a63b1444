"""Training an MTP head on saved target hidden states.

Each position j teaches the head to map (embed(token j+1), hidden j) to the
target's distribution over token j+2, which the target's head gives from
hidden j+1 (soft labels, restricted to the draft vocabulary), and to land
near hidden j+1 itself. A second pass feeds the head's own features back in
place of the target's, as drafting does from its second token on.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
from mlx.utils import tree_flatten, tree_unflatten
from tqdm import tqdm

from ..drafters.mtp import head_rows
from ..errors import SpecmlxError
from ..models.mtp import MTPModel, save_mtp
from ..hidden import embed, text_model
from .features import ANSWER, PAD, ShardRef, TrainingSet, load_shard, shard_count

SORT_GROUP = 8  # batches' worth of windows sorted by length together: similar lengths, still shuffled
SECOND_PASS_WEIGHT = 0.8  # the second draft token counts a little less, as EAGLE weighs its steps
# EAGLE's balance: the hidden state is a dense, smooth target (every dimension
# teaches), the token distribution a sparse one; a little of it aligns the top token.
REGRESSION_WEIGHT = 1.0
CLASSIFICATION_WEIGHT = 0.1


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 2000
    batch: int = 4  # windows per step
    lr: float = 5e-4
    warmup: int = 50
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    checkpoint_every: int = 100
    seed: int = 0
    passes: int = 2  # draft steps unrolled: each pass after the first feeds back the last one's features
    answer_only: bool = False  # leave the request's tokens out of the loss (agreement never counts them)


@dataclass(frozen=True)
class Progress:
    step: int
    loss: float
    accept_1: float  # the head's top-1 agrees with the target's, first draft token
    accept_2: float  # and from its own features, the second onwards

    @property
    def mean_accepted(self) -> float:
        """Expected tokens per round at 4 drafts, if agreement were independent per token."""
        a1, a2 = self.accept_1, self.accept_2
        return 1 + a1 * (1 + a2 + a2**2 + a2**3)


def draft_vocabulary(counts: Counter[int], size: int, always: tuple[int, ...] = ()) -> mx.array:
    """The `size` most frequent tokens (plus `always`), sorted; ids 0.. pad a tiny corpus."""
    chosen = set(always)
    for token, _ in counts.most_common():
        if len(chosen) >= size:
            break
        chosen.add(token)
    chosen.update(i for i in range(size * 2) if len(chosen) < size and i not in chosen)
    return mx.array(sorted(chosen)[:size], dtype=mx.int32)


def start_near_the_target(head: MTPModel, hidden_rms: float) -> None:
    """Start the head as "the next hidden state is this one": the hidden half of
    `fc` is the identity, the layers' output projections are zero (each layer adds
    nothing yet) and the output norm restores the target's scale. Its first
    logits are then the target's own, well scaled, and training learns the
    correction; from random weights the logits start far off and learn slowly."""
    width = head.config.target_hidden_size
    weight = head.fc.weight
    head.fc.weight = mx.concatenate([weight[:, :width] * 0.1, mx.eye(width, dtype=weight.dtype)], axis=1)
    for layer in head.layers:
        layer.self_attn.o_proj.weight = mx.zeros_like(layer.self_attn.o_proj.weight)
        layer.mlp.down_proj.weight = mx.zeros_like(layer.mlp.down_proj.weight)
    head.norm.weight = mx.full(head.norm.weight.shape, hidden_rms, dtype=head.norm.weight.dtype)
    if head.config.fused_layers:  # the fusion starts as the final hidden state alone; the taps' weights learn
        fuse = head.fuse.weight
        head.fuse.weight = mx.concatenate([mx.zeros((width, fuse.shape[1] - width), dtype=fuse.dtype),
                                           mx.eye(width, dtype=fuse.dtype)], axis=1)


def start_from_last_layer(head: MTPModel, target: nn.Module, hidden_rms: float) -> None:
    """The near-identity start, but with the head's decoder layer a copy of the
    target's last: it already knows how this model turns a hidden state into the
    next one, instead of adding nothing at first."""
    start_near_the_target(head, hidden_rms)
    last = text_model(target).model.layers[-1]
    theirs = dense_parameters(last)
    mine = dict(tree_flatten(head.layers[0].parameters()))
    if {k: v.shape for k, v in theirs.items()} != {k: v.shape for k, v in mine.items()}:
        raise SpecmlxError("--init last-layer needs the head's layer shaped as the target's "
                           "(leave --intermediate-size unset)")
    head.layers[0].update(tree_unflatten([(k, v.astype(mine[k].dtype)) for k, v in theirs.items()]))


def dense_parameters(module: nn.Module) -> dict[str, mx.array]:
    """A module's parameters by name, quantized linears dequantized (a 4-bit target's layer)."""
    dense = {}
    for name, child in module.named_modules():
        if isinstance(child, nn.QuantizedLinear):
            prefix = f"{name}." if name else ""
            dense[prefix + "weight"] = mx.dequantize(child.weight, child.scales, child.biases,
                                                     group_size=child.group_size, bits=child.bits)
            if "bias" in child:
                dense[prefix + "bias"] = child.bias
    flat = dict(tree_flatten(module.parameters()))
    for name in list(flat):
        owner = name.rsplit(".", 1)[0]
        if owner + ".weight" in dense and name not in dense:
            del flat[name]  # the quantized weight, scales and biases
    return {**flat, **dense}


def hidden_rms(folder: Path) -> float:
    """The typical scale of the target's final hidden states (one shard's worth)."""
    shard = load_shard(folder, 0)
    hidden = shard.hidden.astype(mx.float32)
    real = (shard.mask > PAD)[..., None]
    return mx.sqrt((hidden * hidden * real).sum() / (real.sum() * hidden.shape[-1])).item()


def real_length(mask: mx.array) -> int:
    """Positions up to the last real token (windows keep their padding at the end)."""
    real = (mask > PAD).astype(mx.int32)
    return int((real * mx.arange(1, real.shape[-1] + 1)).max().item())


@dataclass(frozen=True)
class Batch:
    tokens: mx.array  # (B, L)
    hidden: mx.array  # (B, L, H)
    mask: mx.array  # (B, L)
    taps: mx.array | None = None  # (B, L, T, H), for a head that fuses tapped layers


def trimmed(batch: Batch) -> Batch:
    length = max(real_length(batch.mask), 3)  # the objective needs three positions
    taps = None if batch.taps is None else batch.taps[:, :length]
    return Batch(batch.tokens[:, :length], batch.hidden[:, :length], batch.mask[:, :length], taps)


def stacked(windows: list[Batch]) -> Batch:
    taps = None if windows[0].taps is None else mx.stack([w.taps for w in windows])
    return Batch(*(mx.stack([getattr(w, name) for w in windows]) for name in ("tokens", "hidden", "mask")), taps)


def windows_of(shard, taps: bool) -> list[Batch]:
    """A shard's windows; their taps only for a head that fuses them (a plain head never reads them)."""
    return [Batch(shard.tokens[w], shard.hidden[w], shard.mask[w], shard.taps[w] if taps else None)
            for w in range(shard.tokens.shape[0])]


class Trainer:
    def __init__(self, head: MTPModel, target: nn.Module, train_set: TrainingSet, held_out: Path, out: Path,
                 config: TrainConfig) -> None:
        self.head, self.target, self.train_set, self.out, self.config = head, target, train_set, out, config
        self.rows = head_rows(target, head.draft_ids).astype(mx.float32)  # frozen
        if train_set.windows < config.batch:
            raise SpecmlxError(f"{train_set.windows} training windows are fewer than a batch of {config.batch}")
        self.val_shards = [ShardRef(held_out, i, 0) for i in range(shard_count(held_out))]
        if not self.val_shards:
            raise SpecmlxError(f"{held_out}: no held-out shards")
        for ref in (train_set.shards[0], self.val_shards[0]):
            kept = ref.load().layers
            if head.config.fused_layers and kept != head.config.fused_layers:
                raise SpecmlxError(f"{ref.folder} keeps layers {list(kept) or 'none'}, but the head fuses "
                                   f"{list(head.config.fused_layers)}: collect them (--fused-layers) into a new --out")
        schedule = optim.join_schedules(
            [optim.linear_schedule(1e-7, config.lr, config.warmup),
             optim.cosine_decay(config.lr, max(config.steps - config.warmup, 1), config.lr * 0.1)],
            [config.warmup],
        )
        self.optimizer = optim.AdamW(learning_rate=schedule, weight_decay=config.weight_decay)
        self.step = 0
        self.validated: Progress | None = None  # the last held-out figures, at their step

    # -- the objective ----------------------------------------------------------

    def losses(self, batch: Batch) -> tuple[mx.array, tuple[mx.array, mx.array]]:
        hidden, mask = batch.hidden.astype(mx.float32), batch.mask
        emb = embed(self.target, batch.tokens[:, 1:-1]).astype(mx.float32)  # token j+1
        h_in, h_next = hidden[:, :-2], hidden[:, 1:-1]  # hidden j, hidden j+1
        if self.head.config.fused_layers:
            h_in = self.head.fused(batch.taps[:, :-2].astype(mx.float32), h_in)
        teacher = mx.softmax(h_next @ self.rows.T, axis=-1)
        best = mx.argmax(teacher, axis=-1)
        real = (mask[:, :-2] > PAD) & (mask[:, 1:-1] > PAD)  # j and j+1 are tokens, not padding
        # Agreement counts where the head would draft: after a token the target answered
        # (j+1 for the first draft token; j for the second, whose j+1 is the first's guess).
        answered = (real & (mask[:, 1:-1] == ANSWER), real & (mask[:, :-2] == ANSWER))

        def mean(values: mx.array, where: mx.array) -> mx.array:
            return (values * where).sum() / mx.maximum(where.sum(), 1)

        def pass_loss(features: mx.array, skip: int) -> tuple[mx.array, mx.array]:
            logits = features[:, skip:] @ self.rows.T
            where = real[:, skip:] & real[:, : real.shape[1] - skip]  # and what was fed back was real
            counted = answered[min(skip, 1)][:, skip:] & where
            ce = -(teacher[:, skip:] * nn.log_softmax(logits, axis=-1)).sum(-1)
            reg = nn.losses.smooth_l1_loss(features[:, skip:], h_next[:, skip:], reduction="none").mean(-1)
            agree = mean(mx.argmax(logits, axis=-1) == best[:, skip:], counted)
            trained = counted if self.config.answer_only else where
            return mean(CLASSIFICATION_WEIGHT * ce + REGRESSION_WEIGHT * reg, trained), agree

        features = self.head(emb, h_in)
        loss, agree = pass_loss(features, 0)
        agreements = [agree]
        for skip in range(1, self.config.passes):
            # Pass `skip`: position j sees the last pass's guess of hidden j (made at j-1).
            features = self.head(emb, mx.concatenate([h_in[:, :1], features[:, :-1]], axis=1))
            step_loss, agree = pass_loss(features, skip)
            loss = loss + SECOND_PASS_WEIGHT**skip * step_loss
            agreements.append(agree)
        # The first draft token's agreement and the second's (none with one pass), as reported before.
        return loss, (agreements[0], agreements[1] if len(agreements) > 1 else mx.array(0.0))

    # -- the loop ----------------------------------------------------------------

    def batches(self, epoch_seed: int):
        """Windows in a seeded order, grouped by length and cut to their batch's longest:
        answers leave much of a window as padding, which costs compute and teaches nothing."""
        shards = self.train_set.shards
        order = mx.random.permutation(len(shards), key=mx.random.key(epoch_seed)).tolist()
        group = self.config.batch * SORT_GROUP
        rng = random.Random(epoch_seed)
        pending: list[tuple[mx.array, mx.array, mx.array]] = []
        for n, i in enumerate(order):
            pending += windows_of(shards[i].load(), bool(self.head.config.fused_layers))
            if len(pending) >= group or n == len(order) - 1:
                pending.sort(key=lambda window: real_length(window.mask))
                cut = len(pending) - len(pending) % self.config.batch
                batches = [pending[b : b + self.config.batch] for b in range(0, cut, self.config.batch)]
                pending = pending[cut:]
                rng.shuffle(batches)
                for batch in batches:
                    yield trimmed(stacked(batch))

    def train(self, progress: bool = True, on_progress: Callable[[Progress], None] | None = None) -> Progress:
        self.resume()
        loss_and_grad = nn.value_and_grad(self.head, self.losses)

        def update(batch: Batch):
            (loss, agree), grads = loss_and_grad(batch)
            grads, _ = optim.clip_grad_norm(grads, self.config.grad_clip)
            self.optimizer.update(self.head, grads)
            return loss, agree

        bar = tqdm(total=self.config.steps, initial=self.step, unit="step", desc="training", disable=not progress)
        last = Progress(self.step, math.nan, 0.0, 0.0)
        smooth = None
        steps_per_epoch = max(self.train_set.windows // self.config.batch, 1)
        epoch = self.step // steps_per_epoch
        while self.step < self.config.steps:
            for batch in self.batches(self.config.seed + epoch):
                loss, (a1, a2) = update(batch)
                mx.eval(loss, a1, a2, self.head.parameters(), self.optimizer.state)
                self.step += 1
                now = (loss.item(), a1.item(), a2.item())
                smooth = now if smooth is None else tuple(0.9 * s + 0.1 * n for s, n in zip(smooth, now))
                last = Progress(self.step, *smooth)
                bar.set_postfix(loss=f"{last.loss:.3f}", accept=f"{last.accept_1:.2f}/{last.accept_2:.2f}",
                                tokens_per_round=f"{last.mean_accepted:.2f}")
                bar.update(1)
                if on_progress:
                    on_progress(last)
                if self.step % self.config.checkpoint_every == 0 or self.step >= self.config.steps:
                    self.checkpoint()
                    held = self.validate()
                    self.log({"step": self.step, "train": asdict(last), "held_out": asdict(held)})
                    bar.write(f"step {self.step}: held-out agreement {held.accept_1:.3f} first token, "
                              f"{held.accept_2:.3f} later; about {held.mean_accepted:.2f} tokens per round at 4")
                if self.step >= self.config.steps:
                    break
            epoch += 1
        bar.close()
        return last

    def validate(self) -> Progress:
        """Agreement on the held-out answers (never trained on), weighted by their size."""
        if self.validated is not None and self.validated.step == self.step:
            return self.validated  # the head has not changed since (the last checkpoint measured it)
        total, weight = [0.0, 0.0, 0.0], 0.0
        for ref in self.val_shards:
            shard = ref.load()
            taps = shard.taps if self.head.config.fused_layers else None
            loss, (a1, a2) = self.losses(trimmed(Batch(shard.tokens, shard.hidden, shard.mask, taps)))
            mx.eval(loss, a1, a2)
            size = float((shard.mask == ANSWER).sum().item())
            for i, v in enumerate((loss.item(), a1.item(), a2.item())):
                total[i] += v * size
            weight += size
        self.validated = Progress(self.step, *(t / max(weight, 1.0) for t in total))
        return self.validated

    def log(self, row: dict) -> None:
        with open(self.out / "training-log.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")

    # -- checkpoints -------------------------------------------------------------

    def checkpoint(self) -> None:
        folder = self.out / "checkpoint"
        folder.mkdir(parents=True, exist_ok=True)
        save_mtp(self.head, folder)
        mx.save_safetensors(str(folder / "optimizer.safetensors"), dict(tree_flatten(self.optimizer.state)))
        (folder / "state.json").write_text(json.dumps({"step": self.step, "config": asdict(self.config)}) + "\n")

    def resume(self) -> None:
        folder = self.out / "checkpoint"
        if not (folder / "state.json").exists():
            return
        from ..models.mtp import load_mtp

        saved = load_mtp(folder)
        self.head.update(saved.parameters())
        self.head.set_draft_ids(saved.draft_ids)
        self.rows = head_rows(self.target, saved.draft_ids).astype(mx.float32)  # the vocabulary it trained on
        self.optimizer.state = tree_unflatten(list(mx.load(str(folder / "optimizer.safetensors")).items()))
        self.step = json.loads((folder / "state.json").read_text())["step"]

