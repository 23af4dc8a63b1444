"""The stats panel's figures, built from settings, rounds and the engine's stats."""

from dataclasses import replace

from app.figures import Figures, finished_figures, idle_figures, started_figures, streaming_figures
from app.session import Started
from app.settings import ChatSettings
from specmlx.policy import DraftPolicy
from app.tally import Tally
from specmlx.events import RoundEvent, Source, TokenEvent
from specmlx.stats import GenerationStats

STATS = GenerationStats(
    drafter="ngram", num_draft=4, prompt_tokens=30, generation_tokens=9, rounds=3, drafted=8, accepted=6,
    accepted_histogram=(1, 0, 2, 0, 0), target_forwards=3, host_syncs=3, prefill_s=0.1, decode_s=0.5,
    draft_s=0.0, verify_s=0.4, profiled=False, finish_reason="eos", auto=True,
)


def rounds_of(*sizes: int) -> list[RoundEvent]:
    """Rounds that emitted `size` tokens each: size - 1 accepted drafts and the target's own."""
    return [RoundEvent(tuple(TokenEvent(0, "x", Source.DRAFT) for _ in range(size - 1))
                       + (TokenEvent(0, "x", Source.CORRECTED),), 4, 4, size - 1) for size in sizes]


def test_idle_and_started_say_how_the_answer_drafts():
    assert idle_figures(ChatSettings(drafter="noisy")).draft == "auto"
    assert idle_figures(ChatSettings(drafter="noisy", policy=DraftPolicy(num_draft=4))).draft == "4"
    assert idle_figures(ChatSettings(drafter="noisy", speculation=False)).draft == "off"
    assert idle_figures(ChatSettings(drafter="ngram"), baseline_tps=3.0) == Figures(
        drafter="prompt lookup", draft="auto", baseline_tps=3.0)
    config = ChatSettings(policy=DraftPolicy(num_draft=None)).generation_config()
    started = started_figures(Started(prompt_tokens=30, reused=12, drafter="noisy", config=config))
    assert started == Figures(drafter="noisy", draft="auto", prompt_tokens=30, reused=12)


def test_tokens_per_second_leave_out_the_first_round_which_paid_for_the_prefill():
    tally = Tally()
    tally.add(rounds_of(5)[0])
    assert streaming_figures(Figures(), tally, elapsed=0.0).tps is None  # nothing decoded since it came
    for event in rounds_of(3, 2):
        tally.add(event)
    figures = streaming_figures(Figures(), tally, elapsed=0.5)
    assert (figures.tokens, figures.tps, figures.rounds) == (10, (3 + 2) / 0.5, 3)
    assert figures.accepted_per_round == (4, 2, 1) and figures.draft_lengths == (4, 4, 4)


def test_the_engines_numbers_replace_the_live_ones_and_the_sparklines_stay():
    tally = Tally.of(rounds_of(5, 3, 1))
    shown = replace(streaming_figures(Figures(prompt_tokens=30), tally, 0.5), baseline_tps=20.0)
    final = finished_figures(shown, STATS, tally)
    assert (final.tokens, final.tps, final.rounds, final.acceptance) == (9, 9 / 0.5, 3, 6 / 8)
    assert (final.drafter, final.draft, final.mean_accepted) == ("prompt lookup", "auto", 3.0)
    assert final.accepted_per_round == (4, 2, 0) and final.finished
    assert (final.prompt_tokens, final.baseline_tps) == (30, 20.0)  # what the answer's start and a baseline said
    nothing = finished_figures(Figures(), replace(STATS, drafted=0, accepted=0), Tally())
    assert nothing.acceptance is None  # nothing drafted: no rate, the panel says "no drafts"
