"""The engine: a target, its cache and context, and the drafter in use.

The engine speaks token ids and MLX arrays. It keeps the target's KV cache
and the committed context across generations, swaps drafters (`use`),
prefills what a new prompt does not share with the cache, and starts
generations (`generation.py`), each a loop of rounds (`round.py`). It knows
nothing of ranks: a sharded target's lockstep comes in as its `peers`.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Iterable, Mapping, Sequence

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.utils import common_prefix_len

from .caches.kinds import KVBits
from .caches.stream import make_cache
from .caches import snapshot
from .caches.snapshot import TARGET, leading
from .drafters import Drafter, drafts_blocks, keeps_on_disk, missing_members, reads_hidden
from .config import MAX_SEED, RANDOM_SEED, GenerationConfig
from .errors import SpecmlxError
from .generation import Generation
from .grammar import Constraint, Grammar, grammar_tokenizer
from .hidden import check_exposes_hidden, decoder_taps
from .peers import ALONE, Peers
from .policy import DraftPolicy
from .schedule import AutoDraft, AutoDrafts
from .stats import StatsRecorder
from .vision.images import Images, agreement
from .vocab import context_window, vocab_size

__all__ = ["Engine", "Generation", "GenerationConfig", "MAX_SEED", "RANDOM_SEED"]


class Engine:
    """A target model, a drafter and their caches, reused across generations.

    A new prompt that extends the previous context (a chat's next turn) is
    prefilled only past the longest prefix both caches already hold.
    """

    def __init__(
        self,
        target: nn.Module,
        drafter: Drafter,
        tokenizer: Any | None = None,
        eos_token_ids: Iterable[int] | None = None,
        peers: Peers = ALONE,
        autos: AutoDrafts | None = None,
        kv: KVBits | None = None,
    ) -> None:
        """`peers`: the other ranks a sharded target keeps in step with
        (`specmlx.distributed.Lockstep`), none by default. `autos`: the
        automatic draft lengths, per drafter; engines that serve one machine
        (a server's slots) share theirs, since what they measure is the
        machine's and the drafter's, not the conversation's. `kv`: the target's
        keys and values kept quantized (`--kv-bits`); drafters keep their own
        caches wide (they are small, and their precision changes only how often
        they are right, never the answer)."""
        self.target = target
        self.peers = peers
        self.tokenizer = tokenizer
        if eos_token_ids is None:
            eos_token_ids = tokenizer.eos_token_ids if tokenizer is not None else ()
        self.eos_token_ids = frozenset(eos_token_ids)
        self.kv = kv
        self.cache = make_cache(target, name="target", kv=kv)
        self.context: list[int] = []  # committed tokens; the caches hold a prefix
        self.images: Images | None = None  # the context's images: the caches' positions are shifted by them
        self.context_window = context_window(target)  # None: the config does not say
        self.autos = AutoDrafts() if autos is None else autos
        # Called at each multiple of `prefill_block` positions a prefill reaches (and at its end) with the
        # prompt and how many positions the caches now hold: the prompt cache on disk keeps a block as it
        # passes, a recurrent layer's state there too (set from above: `specmlx/keeping.py`).
        self.on_prefilled: Callable[[Sequence[int], int], None] | None = None
        self.prefill_block: int | None = None
        check_exposes_hidden(target)
        # For each drafter swapped out, the context its state is a prefix of.
        self._covered: weakref.WeakKeyDictionary[Drafter, list[int]] = weakref.WeakKeyDictionary()
        self._start_using(drafter, covered=[])

    @property
    def reads_hidden(self) -> bool:
        """Whether the drafter reads the target's hidden states (MTP-style)."""
        return self._reads_hidden

    @property
    def fused_layers(self) -> tuple[int, ...]:
        """Target layers whose input the drafter reads besides the final hidden state (EAGLE-3 style)."""
        return self._fused_layers

    def use(self, drafter: Drafter) -> None:
        """Draft with `drafter` from now on, keeping the target's cache.

        The outgoing drafter's state is remembered as a prefix of the context,
        so taking it back later only recomputes what changed since. The
        incoming one is rewound to what it shares with the context; one that
        reads hidden states is attached, and the target's cache is cut back to
        that shared prefix so the next prefill shows it every hidden state it
        missed.
        """
        if drafter is self.drafter:
            return
        outgoing, held = self.drafter, self.context[: self.cache_length()]
        self._start_using(drafter, covered=self._covered.get(drafter, []))
        self._covered.pop(drafter, None)
        self._covered[outgoing] = held

    def _start_using(self, drafter: Drafter, covered: list[int]) -> None:
        """Check and attach first: a drafter that lacks part of its protocol, or cannot read this
        target, changes nothing."""
        missing = missing_members(drafter)
        if missing:  # else a hidden one would go unattached, or a batch would fail on what it lacks
            raise SpecmlxError(f"drafter {type(drafter).__name__} lacks {', '.join(missing)}: see the protocols "
                               "in specmlx/drafters/base.py")
        if self.kv is not None and drafter.reads_target_cache:
            raise SpecmlxError(f"drafter {drafter.name} reads the target's keys and values, which --kv-bits "
                               "keeps quantized; drop --kv-bits to draft with it")
        hidden = reads_hidden(drafter)  # once per swap, not every round
        if hidden:
            drafter.attach(self.target, self.cache)
        keep = min(common_prefix_len(covered, self.context), self.cache_length())
        drafter.rewind(keep)
        if hidden:
            self.cache.rewind(keep)
        self.drafter: Drafter = drafter
        self._reads_hidden = hidden
        self._fused_layers = tuple(drafter.fused_layers) if hidden else ()

    def forget(self, keep: int) -> None:
        """Keep only the first `keep` tokens of the context and caches (a new
        conversation in a kept slot; a rank that mirrors rank 0's slots)."""
        self.context = self.context[:keep]
        if keep == 0:
            self.images = None
        self.rewind(keep)

    def adopt(self, source: "Engine", length: int, images: Images | None = None) -> int:
        """Hold the first `length` tokens of `source`'s context, its caches' copied rather than
        prefilled (a new conversation that shares a kept one's start, its images `images`); how many it
        holds. The drafter in use copies its own state from `source`'s, if `source` uses the same one.
        Where the target's caches cannot be copied, it holds what it held (0 is returned)."""
        if not (self.cache.copyable and source.cache.copyable):
            return 0
        self.forget(0)
        length = agreement(source.images, images, min(length, len(source.context), source.cache_length()))
        same = source.drafter if source.drafter.name == self.drafter.name else None
        length = min(length, self.drafter.adopt(same, length))
        length = self.cache.copy_prefix(source.cache, length)
        self.context, self.images = source.context[:length], source.images
        self.drafter.rewind(length)  # a drafter's copy past what the target's holds is dropped
        return length

    def capture(self, start: int, end: int) -> dict[str, mx.array]:
        """What the caches hold for positions start..end-1 as named arrays, for the prompt cache on disk
        (`caches.snapshot`): the target's, and the drafter's in use where it keeps its own."""
        arrays = snapshot.capture(self.cache, start, end, TARGET)
        if keeps_on_disk(self.drafter):
            arrays.update(self.drafter.capture(start, end, self._kept_as()))
        return arrays

    def restore(self, tokens: Sequence[int], blocks: Sequence[Mapping[str, mx.array]]) -> int:
        """Hold the prefix of `tokens` that `blocks` (read from disk, from position 0) cover, in place of
        what it holds, where that is more; how many positions it holds. A recurrent layer is restored
        only from a block holding its state; a drafter reading hidden states only as far as its rows."""
        count = len(blocks)
        if self.reads_hidden:  # without its rows it cannot draft from what the target's cache holds
            count = leading(blocks, self._kept_as()) if keeps_on_disk(self.drafter) else 0
        count = snapshot.restorable(self.cache, blocks[:count], TARGET)
        held = self.reusable(tokens)
        if count == 0 or snapshot.span(blocks[count - 1])[1] <= held:
            return held
        self.forget(0)
        length = snapshot.restore(self.cache, blocks[:count], TARGET)
        if keeps_on_disk(self.drafter):
            self.drafter.restore(blocks[:count], self._kept_as())
        self.context = list(tokens[:length])
        return length

    def _kept_as(self) -> str:
        return f"drafter.{self.drafter.name}"

    def rewind(self, length: int) -> None:
        """Both caches hold the first `length` committed tokens at most: an O(1) offset move."""
        self.cache.rewind(length)
        self.drafter.rewind(length)

    def cache_length(self) -> int:
        """How many positions the target's cache holds."""
        return self.cache.length

    def reusable(self, prompt: Sequence[int], images: Images | None = None) -> int:
        """How many of `prompt`'s tokens (its images `images`) the target's cache already holds: what
        prefill skips. A swap to a drafter that reads hidden states may have cut it; recurrent
        layers reach back only to what they kept (`Stream.reachable`); images only to where both
        prompts' images agree (`vision.images.agreement`)."""
        shared = min(common_prefix_len(self.context, prompt), len(prompt) - 1, self.cache_length())
        return self.cache.reachable(agreement(self.images, images, shared))

    def room(self, prompt_tokens: int) -> int | None:
        """How many new tokens fit after a prompt of this length, or None without a known window.
        The last new token is never fed back, so n + m - 1 positions hold m new tokens."""
        return None if self.context_window is None else self.context_window - prompt_tokens + 1

    def generate(self, prompt: Sequence[int], config: GenerationConfig = GenerationConfig()) -> Generation:
        """Start generating from `prompt` (token ids). Iterate the result for round events.

        A prompt and `max_tokens` that do not fit the target's context window
        are refused: past it a model's positions mean nothing and it writes
        garbage. Callers that can shorten (the chat) check `room` first."""
        self.check(prompt, config)
        return Generation(self, list(prompt), config)

    def check(self, prompt: Sequence[int], config: GenerationConfig) -> None:
        """Refuse, in one line, a prompt this engine cannot answer: empty, or with
        `max_tokens`, past the context window (every rank of a sharded target checks it)."""
        if len(prompt) == 0:
            raise SpecmlxError("the prompt is empty")
        room = self.room(len(prompt))
        if room is not None and config.max_tokens > room:
            fits = f"at most {room} new tokens fit" if room > 0 else "no new token fits"
            raise SpecmlxError(
                f"the prompt ({len(prompt)} tokens) and max tokens ({config.max_tokens}) do not fit the "
                f"target's context window of {self.context_window} tokens; {fits}")

    def prefill(self, prompt: list[int], drafter: bool = True, images: Images | None = None) -> None:
        """Bring both caches to hold prompt[:-1], reusing what they share with it. Without
        `drafter`, the target's alone: a `ModelDrafter` keeps a prefix of it, for a caller
        that feeds it the rest (its `prefill`) only once it drafts. `images`: the prompt's, fed in
        place of their tokens and at their positions (`vision`); such a prompt is not kept on disk."""
        keep = self.reusable(prompt, images)
        self.forget(keep)  # the context says what the caches hold, should a chunk below fail
        self.images = images  # the context becomes the prompt's, and its positions its images'
        kept = None if images is not None else self.on_prefilled
        # The decoder alone: prefill reads no logits, so the vocabulary projection is skipped.
        for start, end in self.cache.chunks(len(prompt), None if kept is None else self.prefill_block):
            chunk = mx.array(prompt[start:end], dtype=mx.uint32)[None]
            if images is None:
                hidden, taps = decoder_taps(self.target, chunk, self.cache, self.fused_layers)
            else:
                fed, rows = images.fed(self.target, chunk, start)
                with images.rotated(self.target, start, end):
                    hidden, taps = decoder_taps(self.target, fed, self.cache, self.fused_layers, rows)
            if self.reads_hidden:
                self.drafter.observe(start, hidden[0], None if taps is None else taps[0])
            with self.peers.waiting():
                mx.eval(hidden, [c.state for c in self.cache])
            if kept is not None:
                kept(prompt, end)
        if drafter:
            self.drafter.prefill(prompt)
        self.context = prompt

    def sync(self, rec: StatsRecorder, *arrays: mx.array, keep: tuple[mx.array, ...] = ()) -> list:
        """Evaluate and bring `arrays` to the host; every blocking wait of a round
        goes through here. `keep` is evaluated in the same pass but stays on device."""
        with self.peers.waiting():
            mx.eval(*arrays, *keep)
        rec.host_syncs += 1
        return [a.tolist() for a in arrays]

    def constrain(self, grammar: Grammar | None) -> Constraint | None:
        """A generation's place in `grammar`, over this target's token ids, its answer ended by this
        engine's end-of-sequence tokens (None without a grammar)."""
        if grammar is None:
            return None
        return Constraint(grammar, grammar_tokenizer(self.tokenizer, vocab_size(self.target), self.eos_token_ids))

    def auto_draft(self, drafter: Drafter | None = None, policy: DraftPolicy = DraftPolicy()) -> AutoDraft:
        """The automatic draft length of `drafter` (the current one by default)
        with what it has measured; made on first use."""
        drafter = self.drafter if drafter is None else drafter
        return self.autos.of(drafter.name, policy.max_draft, policy.start,
                             drafter.proposals if drafts_blocks(drafter) else 0)
