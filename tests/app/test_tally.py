"""Rounds counted off the engine's round events while an answer streams."""

from app.tally import Tally
from specmlx.events import RoundEvent, Source, TokenEvent

D, C, B, T = Source.DRAFT, Source.CORRECTED, Source.BONUS, Source.TARGET


def round_of(*sources: Source, num_draft: int = 4, drafted: int | None = None,
             accepted: int | None = None) -> RoundEvent:
    tokens = tuple(TokenEvent(i, "x", s) for i, s in enumerate(sources))
    drafts = sum(s is D for s in sources)
    return RoundEvent(tokens, num_draft, num_draft if drafted is None else drafted,
                      drafts if accepted is None else accepted)


def test_each_rounds_accepted_drafts_and_planned_length_come_from_its_event():
    tally = Tally()
    rounds = [round_of(D, D, C), round_of(D, D, D, D, B), round_of(T, num_draft=0),
              round_of(D, B, num_draft=3, drafted=1)]  # planned 3; prompt lookup found 1
    for event in rounds:
        tally.add(event)
    assert tally.accepted_per_round == [2, 4, 0, 1]
    assert tally.draft_lengths == [4, 4, 0, 3]  # as planned, whatever was proposed
    assert tally.tokens == 11 and tally.rounds == 4
    assert tally.mean_accepted == 11 / 4  # (accepted + rounds) / rounds, as GenerationStats counts


def test_a_round_cut_short_counts_what_the_target_accepted_not_what_was_emitted():
    # End of sequence was the third accepted draft: two drafts emitted, three accepted.
    # And a round that emitted nothing at all (end of sequence first) is still a round.
    tally = Tally.of([round_of(D, C), round_of(D, D, accepted=3), round_of(accepted=0)])
    assert tally.accepted_per_round == [1, 3, 0]
    assert tally.tokens == 4 and tally.rounds == 3
    assert tally.mean_accepted == (4 + 3) / 3
