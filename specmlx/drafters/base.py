"""The drafter protocol: anything that proposes tokens for the target to check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable, Mapping, Protocol, Sequence, runtime_checkable

import mlx.core as mx
import mlx.nn as nn

from ..events import draft_steps
from ..sampling import SamplingParams


@dataclass(frozen=True)
class Draft:
    """Proposed tokens, possibly still lazy.

    `tokens`: (k,) uint32 ids. `probs`: (k, V) float32, the distribution each
    token was drawn from, or None when the drafter is deterministic (as at
    temperature 0, or for prompt lookup); verification then treats q as one-hot.
    `predicted`: copied from the request's prediction (`prediction.py`). `blocked`: proposed by one
    drafter forward whatever their number (a block drafter, `DraftsBlocks`).
    """

    tokens: mx.array
    probs: mx.array | None = None
    predicted: bool = False
    blocked: bool = False

    @property
    def size(self) -> int:
        return self.tokens.shape[0]

    @property
    def steps(self) -> int:
        """Drafter forwards it took (a copy's are counted by whoever knows it is one: none)."""
        return draft_steps(self.size, self.blocked)

    @staticmethod
    def empty() -> "Draft":
        return Draft(mx.zeros((0,), dtype=mx.uint32))


class Drafter(Protocol):
    """Proposes up to `num_draft` continuations of `tokens`.

    `tokens` is the whole committed sequence (prompt and output so far); its
    last token has not been scored by the target yet. A drafter with state
    (a KV cache) keeps it as a prefix of `tokens` and is told via `rewind`
    how much of what it saw survived verification.
    """

    name: str
    drafts: bool  # whether it ever proposes anything: `none` does not, and rounds then plan no drafts
    # Its own small language model, run on a KV cache of its own (`cache`): a batch runs the rows
    # that share one in one forward a step. None for drafters without one.
    draft_model: nn.Module | None
    # It attends over the target's KV cache in place (a Gemma 4 assistant), so it is attached
    # again wherever the target's rows move (into a batch's cache, back to a slot's).
    reads_target_cache: bool

    def prefill(self, tokens: Sequence[int]) -> None:
        """Absorb a new prompt before the first round (state kept as a prefix)."""

    def draft(
        self, tokens: Sequence[int], num_draft: int, sampling: SamplingParams, key: mx.array,
        p_min: float = 0.0, allowed: Callable[[list[int]], mx.array] | None = None,
    ) -> Draft:
        """Propose at most `num_draft` tokens; lazily where possible. A drafter
        with a distribution stops early after a step whose top probability is
        below `p_min` (see `confidence.py`); 0 drafts all `num_draft`. Under a
        grammar the round also passes `allowed` (`loop.Allowed`): a model drafter
        draws each token from what it lets through."""

    def rewind(self, length: int) -> None:
        """Forget everything past the first `length` tokens of the sequence."""

    def may_propose(self, tokens: Sequence[int]) -> bool:
        """Whether its next draft could hold anything once one more token, whichever, follows `tokens`:
        True for a model; for a copy from the context, only where the tail could match; never for
        none. A round after one sure to propose nothing has its forward started first (`generation.overlaps`)."""

    def fresh(self) -> "Drafter":
        """A drafter sharing these weights, with no state: one per conversation the server keeps."""

    def adopt(self, source: "Drafter | None", length: int) -> int:
        """With no state yet, hold what `source` (another instance of it whose state covers the first
        `length` tokens, or None) holds of them, copied; how many of them it then covers
        (`Engine.adopt`: a new conversation that shares a kept one's start)."""

    def held_bytes(self) -> int:
        """What its own state holds in memory now (a server's slots keep their caches under a cap)."""

    def bytes_per_token(self, target: nn.Module) -> int:
        """What its state holds per token of context beside `target`, from shapes alone (lazily, no
        forward evaluated): a server sizes its slots by it. 0 for one that keeps nothing per token."""


class HoldsNothing:
    """The Drafter members of a drafter that keeps no state of its own (prompt lookup, none, a following
    rank's): nothing to prefill, rewind, copy or count in memory, and no small model to share."""

    draft_model, reads_target_cache = None, False

    def prefill(self, tokens: Sequence[int]) -> None:
        pass

    def rewind(self, length: int) -> None:
        pass

    def adopt(self, source: object, length: int) -> int:
        return length

    def held_bytes(self) -> int:
        return 0

    def bytes_per_token(self, target: object) -> int:
        return 0


class AlwaysMayPropose:
    """`Drafter.may_propose` of a drafter that may propose after any token: a model, or a following
    rank that proposes what rank 0 sent."""

    def may_propose(self, tokens: Sequence[int]) -> bool:
        return True


@runtime_checkable
class Remembers(Protocol):
    """A drafter that learns from its owner's earlier requests (`suffix`): told, before each request,
    whose it serves (an API key's id; None without keys), so that it proposes only from that owner's text;
    and, after each, the context it ended with, whichever drafter served it."""

    def serve(self, owner: Hashable) -> None:
        """Serve `owner`'s requests from now on."""

    def remember(self, tokens: Sequence[int]) -> None:
        """Learn `tokens`, a finished request's prompt and answer, host-side (no forward)."""


def tell_owner(drafter: "Drafter", owner: Hashable) -> None:
    """Tell `drafter` whose request it serves next, if it remembers requests (`Remembers`); a server
    calls it on each drafter of the slot it takes, before the request runs."""
    if isinstance(drafter, Remembers):
        drafter.serve(owner)


def tell_finished(drafter: "Drafter", tokens: Sequence[int]) -> None:
    """Hand `drafter`, if it remembers requests, the context its slot's request ended with (`tokens`):
    a server calls it on each drafter of the slot, so a turn drafted by another still teaches it."""
    if isinstance(drafter, Remembers):
        drafter.remember(tokens)


@runtime_checkable
class HiddenDrafter(Drafter, Protocol):
    """A drafter that reads the target (MTP-style): its embeddings, final hidden
    states and, for Gemma 4 assistants, its KV cache. The engine recognises
    one by `attach` and `observe` (`reads_hidden`), and refuses one that has
    either but lacks another member (`missing_members`).

    The engine calls `attach` when it starts using the drafter, then
    `observe` with the hidden states of every position the target scores
    (prefill and verify), lazily and before the round's sync; `rewind` then
    drops the rows of rejected positions.
    """

    # Target layers whose input it reads besides the final hidden state (an EAGLE-3-style
    # head); the engine taps them in the same forward. Empty for most.
    fused_layers: tuple[int, ...]

    def attach(self, target: nn.Module, cache: list) -> None:
        """Share the target's weights and caches (read only)."""

    def observe(self, start: int, hidden: mx.array, taps: mx.array | None = None) -> None:
        """`hidden` (n, H): the target's final hidden states at positions start..start+n-1;
        `taps` (n, T, H): what enters each of `fused_layers` there (None when there are none)."""


class DraftsBlocks(Protocol):
    """A drafter whose one forward proposes up to `proposals` tokens at once (DFlash): a round's
    drafts cost it one step whatever their number, and its drafts say so (`Draft.blocked`)."""

    proposals: int


def drafts_blocks(drafter: Drafter) -> bool:
    """Whether `drafter` proposes a whole draft in one forward (`DraftsBlocks`, known by `proposals`)."""
    return hasattr(drafter, "proposals")


class KeepsOnDisk(Protocol):
    """A drafter whose state the prompt cache on disk keeps beside the target's (`specmlx.diskcache`),
    as named arrays under `prefix`, block by block. One without it keeps nothing there: one that holds
    nothing, or catches up itself, loses nothing; one that reads hidden states then restores none."""

    def capture(self, start: int, end: int, prefix: str) -> dict[str, mx.array]:
        """Copies of its state for positions start..end-1; empty where it does not hold them all."""

    def restore(self, blocks: Sequence[Mapping[str, mx.array]], prefix: str) -> int:
        """Hold what `blocks` (from position 0) keep under `prefix`, in place of its own; how many positions."""


def keeps_on_disk(drafter: Drafter) -> bool:
    return hasattr(drafter, "capture") and hasattr(drafter, "restore")


class ModelDrafting(Drafter, Protocol):
    """A drafter with a `draft_model`: what a batch's shared forward reads of it (`batch.drafting`)."""

    draft_model: nn.Module
    vocab_size: int  # the target's logit width, which its logits are cut or padded to
    cache: list  # its model's KV cache


def _declared(protocol: type) -> tuple[str, ...]:
    """The members a protocol class declares itself: its annotated attributes, then its methods."""
    methods = [n for n, v in vars(protocol).items() if callable(v) and not n.startswith("_")]
    return (*vars(protocol).get("__annotations__", {}), *methods)


DRAFTER_MEMBERS = _declared(Drafter)
HIDDEN_MEMBERS = _declared(HiddenDrafter)
MODEL_MEMBERS = tuple(m for m in _declared(ModelDrafting) if m not in DRAFTER_MEMBERS)


def reads_hidden(drafter: Drafter) -> bool:
    """Whether `drafter` reads the target's hidden states: a `HiddenDrafter`, known by `attach` and `observe`."""
    return hasattr(drafter, "attach") and hasattr(drafter, "observe")


def missing_members(drafter: object) -> list[str]:
    """The members of its protocol that `drafter` lacks: `Drafter`'s; `HiddenDrafter`'s too where it has
    `attach` or `observe`; `ModelDrafting`'s where it has a `draft_model`. Empty for a complete one."""
    wanted = list(DRAFTER_MEMBERS)
    if hasattr(drafter, "attach") or hasattr(drafter, "observe"):
        wanted += HIDDEN_MEMBERS
    if getattr(drafter, "draft_model", None) is not None:
        wanted += MODEL_MEMBERS
    return [m for m in wanted if not hasattr(drafter, m)]
