"""What one round of the engine is to do (`Plan`) and what it committed (`Round`): the records the round, the schedules and the stats share."""

from __future__ import annotations

from dataclasses import dataclass

from .events import Source, drafter_steps


@dataclass(frozen=True)
class Plan:
    """What a round is to do: draft at most `num_draft` tokens; with `timed`,
    sync once more after drafting to time it apart; with `probe`, in a round
    that drafts nothing, ask the drafter for one token and see whether the
    target would have accepted it, without proposing it."""

    num_draft: int
    timed: bool = False
    probe: bool = False


@dataclass(frozen=True)
class Round:
    """The accepted drafts then the target's own next token (`tokens`), out of
    `drafted` proposed, and whether the proposal was copied (`looked_up`: from
    the context, or with `predicted`, from the request's prediction) rather
    than drafted. `draft_s` is the proposing alone, when the round
    timed it apart with one more sync; otherwise None. `probe` is, for a
    probed round, the chance the target would have accepted the probe's
    token (1 or 0 at temperature 0). `ahead`: its first row was scored by the round before (a
    look-ahead), so its own forward scored its drafts alone, one row fewer than its width says.
    `blocked`: one drafter forward proposed its drafts (a block drafter)."""

    tokens: tuple[int, ...]
    drafted: int
    looked_up: bool
    draft_s: float | None = None
    probe: float | None = None
    predicted: bool = False
    ahead: bool = False
    blocked: bool = False

    @property
    def accepted(self) -> int:
        return len(self.tokens) - 1

    @property
    def steps(self) -> int:
        """Drafter forwards the round took (`events.drafter_steps`)."""
        return drafter_steps(self.drafted, self.looked_up, self.blocked, self.probe)

    def source(self, index: int) -> Source:
        """Where `tokens[index]` came from."""
        if index < self.accepted:
            return Source.DRAFT
        if self.drafted == 0:
            return Source.TARGET
        return Source.BONUS if self.accepted == self.drafted else Source.CORRECTED
