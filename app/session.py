"""The model side of a chat: conversation, prompts and engine runs. No Textual here.

Every answer's prompt is the tokenizer's chat template over the whole
conversation, so it extends the engine's context (last prompt + last answer)
and the engine prefills only the new suffix: the target's and the drafter's
KV caches are reused across turns. A session's methods run MLX work and must
all be called from one thread (see `specmlx.mlx_thread`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from time import perf_counter
from typing import Callable, Iterator, Mapping, Sequence

from jinja2 import TemplateError

from specmlx.drafters import NONE
from specmlx import keeping
from specmlx.diskcache.keeper import Keeper
from specmlx.engine import Engine, GenerationConfig
from specmlx.errors import SpecmlxError
from specmlx.events import RoundEvent
from specmlx.policy import DraftPolicy
from specmlx.prompting import encode_chat, encode_text, has_chat_template
from specmlx.stats import GenerationStats

from .drafters import DrafterSet, Loader
from .settings import ChatSettings
from .thinking import Thinking, thinking_of

# Without a chat template the conversation is a plain transcript, cut at the next turn.
PLAIN_STOP = ("\nUser:",)


@dataclass(frozen=True)
class ChatMessage:
    role: str  # "user" or "assistant"
    content: str


@dataclass(frozen=True)
class Started:
    """An answer began: the prompt, what the caches already held of it, and
    how many of the oldest messages were left out to fit the context window
    (`config.max_tokens` is then at most the room that was left)."""

    prompt_tokens: int
    reused: int
    drafter: str  # the drafter's name
    config: GenerationConfig
    dropped: int = 0
    thinking: Thinking | None = None  # a thinking model's markers, and whether the prompt opened the block


@dataclass(frozen=True)
class Streamed:
    """One round of the answer, as the engine reported it; `elapsed` is
    seconds since the first round arrived."""

    round: RoundEvent
    elapsed: float


@dataclass(frozen=True)
class Finished:
    """The answer is over (done, stopped or cut); `text` is all of it, `tail` included."""

    text: str
    tail: str
    stats: GenerationStats


Update = Started | Streamed | Finished


@dataclass(frozen=True)
class Baseline:
    """Plain decoding speed of the target, measured on this machine."""

    tps: float
    tokens: int


# The chat's owner in the prompt cache on disk: not a keyless server's (""), whose clients could
# otherwise find its chats' prefixes there.
APP = "specmlx-chat"


class Session:
    """One conversation over one engine.

    `drafters` holds the drafters the settings offer, by name: the engine's
    own, and `later` ones loaded on first use. The engine's drafter is swapped
    between answers (`Engine.use`, which keeps each drafter in step with the
    context).
    """

    def __init__(self, engine: Engine, *, target_name: str = "target",
                 later: Mapping[str, Loader] | None = None, disk: Keeper | None = None) -> None:
        """`disk`: the prompt cache on disk, which a reopened chat (in this run or a later one)
        continues from, and each answer is kept in; None: memory only."""
        self.engine = engine
        self.disk = disk
        self.target_name = target_name
        self.drafters = DrafterSet(engine.drafter, later)
        self.history: list[ChatMessage] = []
        self._last: tuple[list[int], GenerationConfig, int] | None = None  # prompt, config, tokens

    # -- what the UI asks about -------------------------------------------------

    @property
    def default_drafter(self) -> str:
        """The drafter the models were loaded with."""
        return self.drafters.default

    @property
    def thinking(self) -> Thinking | None:
        """The model's think markers, if it thinks (a reopened answer is split by its text alone)."""
        return thinking_of(self.engine.tokenizer)

    @property
    def has_chat_template(self) -> bool:
        return has_chat_template(self.engine.tokenizer)

    def reset(self, history: Sequence[ChatMessage] = ()) -> None:
        """Start over (a new chat) or continue a stored one, of which only the
        messages `in_turn` are kept. The caches stay: a new chat with the same
        system prompt still shares its prefix."""
        self.history = [m for m, kept in zip(history, in_turn(history)) if kept]
        self._last = None

    def prompt_ids(self, system: str = "", skip: int = 0) -> list[int]:
        """The conversation but its `skip` oldest messages, ready for the assistant's next answer."""
        tokenizer, history = self.engine.tokenizer, self.history[skip:]
        if not self.has_chat_template:
            return encode_text(tokenizer, plain_transcript(history, system))
        messages = [{"role": "system", "content": system}] if system else []
        messages += [{"role": m.role, "content": m.content} for m in history]
        try:
            return encode_chat(tokenizer, messages)
        except TemplateError as err:  # the conversation, not the code: say what the template said
            raise SpecmlxError(f"the model's chat template refuses this conversation: {err}") from None

    def fit(self, system: str, max_tokens: int) -> tuple[list[int], int, int]:
        """The prompt that fits the target's context window with room to answer:
        (prompt, oldest messages left out, max tokens). Whole exchanges go,
        oldest first, until `max_tokens` fit after the prompt; the system
        prompt and the new message always stay, and if they alone leave less
        room, the answer is shortened to what is left."""
        skip = 0
        while True:
            prompt = self.prompt_ids(system, skip)
            room = self.engine.room(len(prompt))
            if room is None or room >= max_tokens or skip + 1 >= len(self.history):
                break
            skip += 1
            if skip + 1 < len(self.history) and self.history[skip].role == "assistant":
                skip += 1  # a question goes with its answer
        if room is not None and room < 1:
            raise SpecmlxError(
                f"this message is too long: with the system prompt it takes {len(prompt)} tokens, and the "
                f"model's context window holds {self.engine.context_window}; shorten it")
        return prompt, skip, max_tokens if room is None else min(max_tokens, room)

    # -- running the engine ----------------------------------------------------

    def stream(self, text: str, settings: ChatSettings, stop: Callable[[], bool] = lambda: False) -> Iterator[Update]:
        """Answer `text`: yields Started, then one Streamed a round, then Finished.

        `stop()` is asked after each round: once it turns true the generation
        is closed before the next round, and what was emitted is kept, in the
        history too.
        """
        self.history.append(ChatMessage("user", text))
        try:
            choice = self._select(settings.active_drafter)
            config = settings.generation_config(stop=() if self.has_chat_template else PLAIN_STOP)
            prompt, dropped, max_tokens = self.fit(settings.system, config.max_tokens)
            config = replace(config, max_tokens=max_tokens)
            if self.disk is not None:
                keeping.restore(self.disk, self.engine, APP, prompt)
            generation = self.engine.generate(prompt, config)
        except Exception:
            # Not sent: a question with no answer would break the turn order
            # that chat templates check, on every later message.
            self.history.pop()
            raise
        reused = self.engine.reusable(prompt)
        yield Started(len(prompt), reused, choice, config, dropped, thinking_of(self.engine.tokenizer, prompt))
        emitted: list[str] = []
        try:
            first = None
            for event in generation:
                now = perf_counter()
                first = now if first is None else first
                emitted.append(event.text)
                yield Streamed(event, now - first)
                if stop():
                    break
        finally:
            generation.close()  # the caches keep what was emitted
            # Even after a failure: the history keeps what was shown, as the stored chat does.
            self.history.append(ChatMessage("assistant", "".join(emitted) + generation.tail))
            if self.disk is not None:  # written by its own thread: the answer is shown first
                keeping.keep(self.disk, self.engine, APP, len(prompt))
        answer = self.history[-1].content
        self._last = (prompt, config, generation.stats.generation_tokens)
        yield Finished(answer, generation.tail, generation.stats)

    def close(self) -> None:
        """Write what the disk cache has queued; safe to call twice."""
        if self.disk is not None:
            self.disk.close()
            self.disk = None

    def measure_baseline(self, stop: Callable[[], bool] = lambda: False) -> Baseline:
        """Decode the last prompt again with no drafter, as many tokens as its
        answer had, and report plain tokens/s: the speedup's denominator."""
        if self._last is None:
            raise SpecmlxError("nothing to compare with yet: send a message first")
        prompt, config, tokens = self._last
        self._select(NONE)
        room = self.engine.room(len(prompt))
        budget = max(tokens, 8) if room is None else min(max(tokens, 8), room)
        run = self.engine.generate(prompt, replace(config, max_tokens=budget, policy=DraftPolicy(num_draft=0)))
        try:
            for _ in run:
                if stop():
                    break
        finally:
            run.close()
        if stop():
            raise SpecmlxError("measuring plain decoding was stopped")
        return Baseline(run.stats.generation_tps, run.stats.generation_tokens)

    def _select(self, choice: str | None) -> str:
        """Make `choice` (None: the default) the engine's drafter, in step with
        the engine's context; its first use loads it."""
        choice = choice or self.drafters.default
        self.engine.use(self.drafters.drafter(choice))
        return choice


def in_turn(messages: Sequence[ChatMessage]) -> list[bool]:
    """Which messages a prompt keeps: each answer and the message it answers.

    A message never answered (refused, or the app closed before its answer
    began) stays in the stored chat but is left out, so the turns alternate
    as chat templates require.
    """
    kept = [False] * len(messages)
    for i in range(1, len(messages)):
        if messages[i].role == "assistant" and messages[i - 1].role == "user":
            kept[i - 1] = kept[i] = True
    return kept


def plain_transcript(history: Sequence[ChatMessage], system: str = "") -> str:
    """A chat as plain text, for tokenizers without a chat template."""
    lines = [system] if system else []
    lines += [f"{m.role.capitalize()}: {m.content}" for m in history]
    return "\n".join(lines + ["Assistant:"])
