"""What the stats panel shows about the latest answer, built from what the chat reports. No Textual here.

Before an answer, from the settings the next one uses; as it streams, from
`Started` and the rounds' `Tally`; when it ends, from the engine's own
`GenerationStats`, with the per-round sparklines from the rounds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specmlx.drafters import NONE
from specmlx.policy import DraftPolicy
from specmlx.stats import GenerationStats

from .session import Started
from .settings import ChatSettings, drafter_label
from .tally import Tally


@dataclass(frozen=True)
class Figures:
    """What the panel shows about the latest answer.

    `acceptance` is None while an answer streams: it needs the number of
    drafted tokens, which only the engine's final stats hold (`finished`).
    """

    drafter: str = ""
    draft: str = "off"  # the draft length setting: "off" (no speculation), "auto" or a number
    draft_lengths: tuple[int, ...] = ()  # the length planned for each round so far
    tokens: int = 0
    tps: float | None = None
    acceptance: float | None = None
    mean_accepted: float | None = None
    rounds: int = 0
    accepted_per_round: tuple[int, ...] = ()  # empty for an answer saved before rounds were kept
    prompt_tokens: int = 0
    reused: int = 0
    baseline_tps: float | None = None  # plain decoding on this answer's prompt
    measuring: bool = False
    finished: bool = False


def draft_setting(drafter: str | None, auto: bool, num_draft: int | None) -> str:
    """"off" with no drafter, else the length as `DraftPolicy` writes it: "auto" or a number."""
    return "off" if drafter == NONE else str(DraftPolicy(num_draft=None if auto else num_draft))


def idle_figures(settings: ChatSettings, baseline_tps: float | None = None) -> Figures:
    """No answer on screen: the drafter and draft length the next one uses."""
    choice = settings.active_drafter
    draft = draft_setting(choice, settings.policy.auto, settings.policy.num_draft)
    return Figures(drafter=drafter_label(choice), draft=draft, baseline_tps=baseline_tps)


def started_figures(started: Started) -> Figures:
    """An answer began: its prompt, how much of it the caches held, and how it drafts."""
    policy = started.config.policy
    draft = draft_setting(started.drafter, policy.auto, policy.num_draft)
    return Figures(drafter=drafter_label(started.drafter), draft=draft, prompt_tokens=started.prompt_tokens,
                   reused=started.reused)


def streaming_figures(figures: Figures, tally: Tally, elapsed: float) -> Figures:
    """After each round; `elapsed` counts from the first round, whose tokens are
    left out of tokens/s as that round also paid for the prefill."""
    decoded = tally.tokens - tally.first_round
    return replace(
        figures, tokens=tally.tokens, tps=decoded / elapsed if decoded and elapsed > 0 else None,
        mean_accepted=tally.mean_accepted, rounds=tally.rounds,
        accepted_per_round=tuple(tally.accepted_per_round), draft_lengths=tuple(tally.draft_lengths),
    )


def finished_figures(figures: Figures, stats: GenerationStats, tally: Tally) -> Figures:
    """The engine's own numbers, as this answer ran; the per-round sparklines come from the rounds."""
    draft = draft_setting(stats.drafter, stats.auto, stats.num_draft)
    return replace(
        figures, drafter=drafter_label(stats.drafter), draft=draft, tokens=stats.generation_tokens, tps=stats.generation_tps,
        acceptance=stats.acceptance_rate if stats.drafted else None, mean_accepted=stats.mean_accepted,
        rounds=stats.rounds, accepted_per_round=tuple(tally.accepted_per_round),
        draft_lengths=tuple(tally.draft_lengths), measuring=False, finished=True,
    )
