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
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
from mlx.utils import tree_flatten
from tqdm import tqdm

from ..drafters.mtp import head_rows
from ..errors import SpecmlxError
from ..models.mtp import MTPModel, save_mtp
from ..hidden import embed
from .features import load_shard, shard_count

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
    validation_shards: int = 1
    seed: int = 0


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


def shard_token_counts(folder: Path) -> Counter[int]:
    counts: Counter[int] = Counter()
    for index in range(shard_count(folder)):
        counts.update(load_shard(folder, index).tokens.reshape(-1).tolist())
    return counts


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


def hidden_rms(folder: Path) -> float:
    """The typical scale of the target's final hidden states (one shard's worth)."""
    hidden = load_shard(folder, 0).hidden.astype(mx.float32)
    return mx.sqrt(mx.mean(hidden * hidden)).item()


class Trainer:
    def __init__(self, head: MTPModel, target: nn.Module, folder: Path, out: Path, config: TrainConfig) -> None:
        self.head, self.target, self.folder, self.out, self.config = head, target, folder, out, config
        self.rows = head_rows(target, head.draft_ids).astype(mx.float32)  # frozen
        shards = shard_count(folder)
        if shards <= config.validation_shards:
            raise SpecmlxError(f"need more than {config.validation_shards} feature shards, have {shards}")
        # The first shards are held out; the rest is listed again every epoch, so
        # shards that a collection still running adds are trained on as they come.
        self.val_shards = list(range(config.validation_shards))
        schedule = optim.join_schedules(
            [optim.linear_schedule(1e-7, config.lr, config.warmup),
             optim.cosine_decay(config.lr, max(config.steps - config.warmup, 1), config.lr * 0.1)],
            [config.warmup],
        )
        self.optimizer = optim.AdamW(learning_rate=schedule, weight_decay=config.weight_decay)
        self.step = 0

    # -- the objective ----------------------------------------------------------

    def losses(self, tokens: mx.array, hidden: mx.array) -> tuple[mx.array, tuple[mx.array, mx.array]]:
        hidden = hidden.astype(mx.float32)
        emb = embed(self.target, tokens[:, 1:-1]).astype(mx.float32)  # token j+1
        h_in, h_next = hidden[:, :-2], hidden[:, 1:-1]  # hidden j, hidden j+1
        teacher = mx.softmax(h_next @ self.rows.T, axis=-1)
        best = mx.argmax(teacher, axis=-1)

        def pass_loss(features: mx.array, skip: int) -> tuple[mx.array, mx.array]:
            logits = features[:, skip:] @ self.rows.T
            ce = -(teacher[:, skip:] * nn.log_softmax(logits, axis=-1)).sum(-1).mean()
            reg = nn.losses.smooth_l1_loss(features[:, skip:], h_next[:, skip:], reduction="mean")
            agree = (mx.argmax(logits, axis=-1) == best[:, skip:]).mean()
            return CLASSIFICATION_WEIGHT * ce + REGRESSION_WEIGHT * reg, agree

        first = self.head(emb, h_in)
        loss_1, agree_1 = pass_loss(first, 0)
        # Second pass: position j sees the head's own guess of hidden j (made at j-1).
        fed_back = mx.concatenate([h_in[:, :1], first[:, :-1]], axis=1)
        loss_2, agree_2 = pass_loss(self.head(emb, fed_back), 1)
        return loss_1 + SECOND_PASS_WEIGHT * loss_2, (agree_1, agree_2)

    # -- the loop ----------------------------------------------------------------

    @property
    def train_shards(self) -> list[int]:
        return list(range(self.config.validation_shards, shard_count(self.folder)))

    def batches(self, epoch_seed: int):
        shards = self.train_shards
        order = mx.random.permutation(len(shards), key=mx.random.key(epoch_seed)).tolist()
        buffer_t, buffer_h = [], []
        for i in order:
            shard = load_shard(self.folder, shards[i])
            for w in range(shard.tokens.shape[0]):
                buffer_t.append(shard.tokens[w])
                buffer_h.append(shard.hidden[w])
                if len(buffer_t) == self.config.batch:
                    yield mx.stack(buffer_t), mx.stack(buffer_h)
                    buffer_t, buffer_h = [], []

    def train(self, progress: bool = True, on_progress: Callable[[Progress], None] | None = None) -> Progress:
        self.resume()
        loss_and_grad = nn.value_and_grad(self.head, self.losses)

        def update(tokens: mx.array, hidden: mx.array):
            (loss, agree), grads = loss_and_grad(tokens, hidden)
            grads, _ = optim.clip_grad_norm(grads, self.config.grad_clip)
            self.optimizer.update(self.head, grads)
            return loss, agree

        bar = tqdm(total=self.config.steps, initial=self.step, unit="step", desc="training", disable=not progress)
        last = Progress(self.step, math.nan, 0.0, 0.0)
        smooth = None
        epoch = self.step // max(len(self.train_shards), 1)
        while self.step < self.config.steps:
            for tokens, hidden in self.batches(self.config.seed + epoch):
                loss, (a1, a2) = update(tokens, hidden)
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
                if self.step >= self.config.steps:
                    break
            epoch += 1
        bar.close()
        return last

    def validate(self) -> Progress:
        """Agreement on held-out shards (never trained on)."""
        total, count = [0.0, 0.0, 0.0], 0
        for index in self.val_shards:
            shard = load_shard(self.folder, index)
            loss, (a1, a2) = self.losses(shard.tokens, shard.hidden)
            mx.eval(loss, a1, a2)
            for i, v in enumerate((loss.item(), a1.item(), a2.item())):
                total[i] += v
            count += 1
        return Progress(self.step, *(t / count for t in total))

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
        from mlx.utils import tree_unflatten

        saved = load_mtp(folder)
        self.head.update(saved.parameters())
        self.head.set_draft_ids(saved.draft_ids)
        self.optimizer.state = tree_unflatten(list(mx.load(str(folder / "optimizer.safetensors")).items()))
        self.step = json.loads((folder / "state.json").read_text())["step"]

