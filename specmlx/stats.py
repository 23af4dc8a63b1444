"""Counts and timings of a generation: a frozen record and its recorder."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from time import perf_counter

from .plan import Round
from .schedule import AutoEstimate


@dataclass(frozen=True)
class GenerationStats:
    """Counts and timings of one generation.

    A round drafts up to `num_draft` tokens (with `auto`, the length chosen
    for it) and verifies them in one target forward; `accepted_histogram[n]`
    counts rounds that accepted n drafts, `draft_histogram[k]` rounds whose
    chosen draft length was k, and `plain_rounds` rounds that proposed nothing
    (chose 0, or prompt lookup found no match). `estimate` is what the
    automatic length had measured by the end; `timed_rounds` counts rounds
    that synced once more to time drafting apart (all of them when profiled;
    now and then with the automatic length), so host syncs are rounds plus
    timed rounds (p-min's small checks are not counted). `probes` counts plain rounds in which
    the drafter proposed one token only to learn whether the target would
    have accepted it.
    Unless `profiled`, draft and verify run as one lazy graph with a single
    host sync, so `verify_s` also holds the drafter's own compute and
    `draft_s` only the host-side drafting work.
    """

    drafter: str
    num_draft: int
    prompt_tokens: int
    generation_tokens: int
    rounds: int
    drafted: int
    accepted: int
    accepted_histogram: tuple[int, ...]
    target_forwards: int
    host_syncs: int
    prefill_s: float
    decode_s: float
    draft_s: float
    verify_s: float
    profiled: bool
    finish_reason: str
    draft_histogram: tuple[int, ...] = ()
    plain_rounds: int = 0
    timed_rounds: int = 0
    probes: int = 0
    auto: bool = False
    estimate: AutoEstimate | None = None
    prediction_tokens: int = 0  # the request's prediction, if it had one (`GenerationConfig.prediction`)
    prediction_drafted: int = 0  # drafts copied from it (counted in `drafted`)
    prediction_accepted: int = 0  # of those, accepted and emitted: its tokens that appear in the output
    stop: str = ""  # the stop string that ended it (finish_reason "stop"), as a client may ask which one

    @property
    def mean_accepted(self) -> float:
        """Tokens per round: accepted drafts plus the target's own token."""
        return (self.accepted + self.rounds) / self.rounds if self.rounds else 0.0

    @property
    def mean_chosen(self) -> float:
        """The mean draft length chosen a round (0 for plain rounds): `num_draft` when fixed."""
        rounds = sum(self.draft_histogram)
        return sum(k * n for k, n in enumerate(self.draft_histogram)) / rounds if rounds else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def other_s(self) -> float:
        return max(self.decode_s - self.draft_s - self.verify_s, 0.0)

    @property
    def prompt_tps(self) -> float:
        return self.prompt_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def generation_tps(self) -> float:
        return self.generation_tokens / self.decode_s if self.decode_s > 0 else 0.0

    def to_dict(self) -> dict:
        out = asdict(self)
        out["accepted_histogram"] = list(self.accepted_histogram)
        out["draft_histogram"] = list(self.draft_histogram)
        for name in ("mean_accepted", "mean_chosen", "acceptance_rate", "other_s", "prompt_tps", "generation_tps"):
            out[name] = getattr(self, name)
        return out


@dataclass
class StatsRecorder:
    """Mutable tally kept by the engine during one generation."""

    drafter: str
    num_draft: int
    auto: bool = False
    prompt_tokens: int = 0
    generation_tokens: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    histogram: list[int] = field(default_factory=list)
    chosen: list[int] = field(default_factory=list)
    plain_rounds: int = 0
    timed_rounds: int = 0
    probes: int = 0
    prediction_tokens: int = 0
    prediction_drafted: int = 0
    prediction_accepted: int = 0
    host_syncs: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    _mark: float | None = None

    def record_round(self, chosen: int, done: Round, emitted: int | None = None) -> None:
        """A round planned to draft `chosen` tokens, and what it did; `emitted`, if given: how
        many of its tokens the stop rules let out (generated; of a prediction's copies, accepted)."""
        self.rounds += 1
        self.drafted += done.drafted
        self.accepted += done.accepted
        self.plain_rounds += done.drafted == 0
        self.probes += done.probe is not None
        if emitted is not None:
            self.generation_tokens += emitted
        if emitted is not None and done.predicted:
            self.prediction_drafted += done.drafted
            self.prediction_accepted += min(done.accepted, emitted)
        _count(self.histogram, done.accepted)
        _count(self.chosen, chosen)

    def resume(self) -> None:
        """Start the decode clock (again, after the consumer had a token)."""
        self._mark = perf_counter()

    def pause(self) -> None:
        """Stop the decode clock: time spent by the consumer is not ours."""
        if self._mark is not None:
            self.decode_s += perf_counter() - self._mark
            self._mark = None

    def freeze(self, profiled: bool, finish_reason: str, estimate: AutoEstimate | None = None,
               stop: str = "") -> GenerationStats:
        self.pause()
        width = max(self.num_draft + 1, len(self.histogram), len(self.chosen))
        histogram = self.histogram + [0] * (width - len(self.histogram))
        return GenerationStats(
            drafter=self.drafter,
            num_draft=self.num_draft,
            prompt_tokens=self.prompt_tokens,
            generation_tokens=self.generation_tokens,
            rounds=self.rounds,
            drafted=self.drafted,
            accepted=self.accepted,
            accepted_histogram=tuple(histogram),
            draft_histogram=tuple(self.chosen + [0] * (width - len(self.chosen))),
            plain_rounds=self.plain_rounds,
            timed_rounds=self.timed_rounds,
            probes=self.probes,
            target_forwards=self.rounds,
            host_syncs=self.host_syncs,
            prefill_s=self.prefill_s,
            decode_s=self.decode_s,
            draft_s=self.draft_s,
            verify_s=self.verify_s,
            profiled=profiled,
            finish_reason=finish_reason,
            auto=self.auto,
            estimate=estimate,
            prediction_tokens=self.prediction_tokens,
            prediction_drafted=self.prediction_drafted,
            prediction_accepted=self.prediction_accepted,
            stop=stop,
        )


def _count(histogram: list[int], value: int) -> None:
    if len(histogram) <= value:
        histogram.extend([0] * (value + 1 - len(histogram)))
    histogram[value] += 1
