"""Keeping the ranks in step, round by round, with small collectives on MLX's group.

Rank 0 drafts and verifies; the other ranks hold their shards of the target
and must run exactly the same forwards, on the same tokens, or the sharded
layers' collectives would mix different inputs. So every round:

1. `announce` / `follow`: rank 0 tells the others how many tokens it
   proposes (known on the host before anything is evaluated), or that the
   generation is over. One tiny collective the host waits for.
2. `share`: rank 0's draft tokens reach every rank, inside the round's lazy
   graph, so drafting, scoring and verifying still end in one host sync.
3. `decide`: rank 0's (accepted count, next token) reaches every rank, in
   the same graph. Every rank commits and rewinds by rank 0's word alone, so
   no floating-point difference between machines can make them diverge.

Sums stand in for broadcasts: the other ranks add zeros, and integers add exactly.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from dataclasses import dataclass
from time import perf_counter
from typing import ContextManager

import mlx.core as mx
import mlx.nn as nn

from ..hidden import text_model
from ..peers import Peers
from .group import Group
from .vocab import VocabShard

STOP = -1


@dataclass(frozen=True)
class Control:
    """What a round will score: `size` draft tokens (0: a plain step), and
    whether rank 0 looked them up in the context rather than drafting."""

    size: int
    looked_up: bool = False


class Lockstep:
    """The engine's `Peers` on a sharded target (rank 0's; the other ranks
    follow with `follower.follow`).

    `pipeline`: the target is split by layers (mlx-lm's `pipeline()`), whose
    receive does not wait on its input; the shared draft is then evaluated on
    its own, one more host sync a round, or rank 0 could block in that receive
    while the rank it waits for blocks in `share`. `vocab`: the output head is
    split by vocabulary rows (`vocab.py`), so every rank computes its part of
    the logits whenever rank 0 reads them."""

    def __init__(self, group: Group, pipeline: bool = False, vocab: bool = False) -> None:
        self.group = group
        self.pipeline = pipeline
        self.vocab = vocab
        self.control_s = 0.0  # host time spent in `announce` / `follow`: the collective and any wait for peers
        self.messages = 0
        # Rank 0, from announcing a round until that round's sync (the engine ends it): the
        # others are then inside the round's collectives, and no other message may be sent.
        self.in_round = False

    @property
    def leads(self) -> bool:
        return self.group.leads

    @property
    def one_process(self) -> bool:
        """False: every rank scores in step, so no round runs ahead of its sync."""
        return False

    def lockstep(self) -> "Lockstep":
        return self

    @classmethod
    def of(cls, group: Group, target: nn.Module) -> "Lockstep":
        """The lockstep a sharded target needs, read from how it was split."""
        inner = text_model(target)
        return cls(group, pipeline=getattr(inner.model, "pipeline_size", 1) > 1,
                   vocab=isinstance(inner.model.embed_tokens, VocabShard))

    def _sum(self, mine: mx.array) -> mx.array:
        """Every rank's `mine` added up (lazy): a broadcast of rank 0's, when the others pass zeros."""
        return mx.distributed.all_sum(mine, group=self.group.group, stream=mx.cpu)

    def _broadcast(self, values: list[int], timed: bool = True) -> list[int]:
        """Rank 0's `values` on every rank; the host waits for them (`timed`: within the watchdog's limit)."""
        out = self._sum(mx.array(values if self.leads else [0] * len(values), dtype=mx.int32))
        with self.group.waiting() if timed else nullcontext():
            mx.eval(out)
        return out.tolist()

    def waiting(self) -> ContextManager[None]:
        """For the engine's own waits: a round's sync and prefill involve every rank."""
        return self.group.waiting()

    def _round_message(self, values: list[int]) -> list[int]:
        """A round's announcement, timed: what keeping in step costs rank 0's host."""
        start = perf_counter()
        out = self._broadcast(values)
        self.control_s += perf_counter() - start
        self.messages += 1
        return out

    def publish(self, message: dict | None) -> None:
        """Rank 0: a JSON-able message (a server's next job, a prompt) to every rank, or None to end."""
        assert self.leads and not self.in_round
        data = b"" if message is None else json.dumps(message).encode()
        self._broadcast([len(data) if message is not None else STOP])
        if data:
            self._broadcast(list(data))

    def subscribe(self) -> dict | None:
        """Other ranks: rank 0's next message, or None when it has ended."""
        (length,) = self._broadcast([0], timed=False)  # a server waits for requests as long as it must
        return None if length == STOP else json.loads(bytes(self._broadcast([0] * length)))

    def shared(self, value):
        """Rank 0's JSON-able `value` on every rank (the others pass anything): what only
        rank 0 reads, a prompt file or a prompt set, reaches the others as rank 0 read it."""
        if self.leads:
            self.publish({"value": value})
            return value
        return self.subscribe()["value"]

    def announce(self, control: Control | None) -> None:
        """Rank 0: this round's shape, or None when the generation is over."""
        assert self.leads and not self.in_round
        self.in_round = True  # if the announcement fails, the others are somewhere inside it
        self._round_message([STOP, 0] if control is None else [control.size, int(control.looked_up)])
        self.in_round = control is not None

    def propose(self, tokens: mx.array, looked_up: bool) -> mx.array:
        """Rank 0, as the engine's peers: announce the round's shape, then share its draft."""
        self.announce(Control(tokens.shape[0], looked_up))
        return self.share(tokens)

    def end_round(self) -> None:
        """Rank 0: the round announced last has synced; the others are between rounds again."""
        self.in_round = False

    def stop(self) -> None:
        """Rank 0, when a generation ends however it ends: tell the others, unless a round is
        still open (it or its announcement failed midway); they are then inside its collectives
        and learn of it when this process goes. A collective sent after a failed one can wait
        forever (`liveness.py`), and fail again on top of the first error."""
        if not self.in_round:
            self.announce(None)

    def follow(self) -> Control | None:
        """Other ranks: the next round's shape, or None when rank 0 has finished."""
        size, looked_up = self._round_message([0, 0])
        return None if size == STOP else Control(size, bool(looked_up))

    def share(self, tokens: mx.array) -> mx.array:
        """Rank 0's draft tokens on every rank (lazy); the others pass zeros of the announced size."""
        mine = tokens.astype(mx.int32) if self.leads else mx.zeros(tokens.shape, dtype=mx.int32)
        shared = self._sum(mine).astype(mx.uint32)
        if self.pipeline:
            with self.group.waiting():
                mx.eval(shared)
        return shared

    def decide(self, accepted: mx.array, following: mx.array, after: mx.array) -> tuple[mx.array, mx.array]:
        """Rank 0's verdict on every rank (lazy): how many drafts it accepted, and the next token.

        `after` is the round's forward: a rank's zeros must wait for it, or MLX
        could run this sum before the sharded layers' own and pair collectives
        wrongly across ranks."""
        mine = mx.stack([accepted.astype(mx.int32), following.astype(mx.int32)])
        if not self.leads:
            mine = mx.depends(mx.zeros_like(mine), after)
        both = self._sum(mine)
        return both[0], both[1].astype(mx.uint32)
