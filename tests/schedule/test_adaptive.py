"""Draft length following the acceptance history, and the engine using it."""

from specmlx.plan import Plan
from specmlx.schedule import DraftLength
from specmlx.drafters import ModelDrafter
from specmlx.engine import Engine

from ..test_engine import PROMPTS, reference_greedy, run


def test_full_accepts_lengthen_and_rejections_shorten_within_bounds():
    """Along the set of widths: a step that lands between two is rounded down."""
    length = DraftLength(start=4, limit=7)
    for drafted, accepted, expected in [(4, 4, 6), (6, 6, 6), (6, 2, 4), (4, 4, 6), (6, 0, 4), (4, 0, 3)]:
        length.follow(drafted, accepted)
        assert length.current == expected
    for _ in range(10):
        length.follow(length.current, 0)
    assert length.current == 1


def test_a_length_off_the_set_drafts_the_widest_within_it():
    """A fixed k = 5 drafts 4, whose verify shape is compiled; near the end the room rounds down too."""
    length = DraftLength(start=5, limit=5, adaptive=False)
    assert length.plan(100) == Plan(4) and length.plan(3) == Plan(3) and length.planned == 4
    assert DraftLength(start=7, limit=12).plan(100) == Plan(6)
    assert DraftLength(start=8, limit=12).plan(7) == Plan(6)


def test_fixed_length_stays_put():
    length = DraftLength(start=4, limit=12, adaptive=False)
    length.follow(4, 4)
    length.follow(4, 0)
    assert length.current == 4


def test_adaptive_generation_is_exact_and_varies_the_length(tokenizer, vocab, target, noisy_drafter):
    engine = Engine(target, ModelDrafter(noisy_drafter, vocab), eos_token_ids=[])
    prompt = tokenizer.encode(PROMPTS[0])
    events, stats = run(engine, prompt, max_tokens=40, num_draft=3, adaptive=True, max_draft=6)
    assert [e.token for e in events] == reference_greedy(target, prompt, 40)
    per_round = stats.drafted / stats.rounds
    assert per_round != 3  # it moved: a fixed length of 3 drafts exactly 3 a round (budget aside)
    self_engine = Engine(target, ModelDrafter(target, vocab), eos_token_ids=[])
    _, self_stats = run(self_engine, prompt, max_tokens=40, num_draft=2, adaptive=True, max_draft=6)
    assert self_stats.drafted / self_stats.rounds > 4  # never rejected: it climbs to the limit


def test_only_a_length_of_zero_guesses_plain_rounds():
    assert DraftLength(start=0, limit=4, adaptive=False).likely_plain(10)
    assert not DraftLength(start=4, limit=12).likely_plain(10)
    assert DraftLength(start=4, limit=12).likely_plain(0)


def test_a_fixed_or_adaptive_length_plans_its_start_and_is_not_automatic():
    """What a generation's stats report it planned, and what a batch's load-aware choice skips."""
    length = DraftLength(start=3, limit=8)
    length.follow(3, 3)
    assert length.planned == 3 and length.auto is None  # its start, however far it has moved


def test_a_block_drafter_widens_past_eight_to_its_whole_block_and_back():
    """+2 from 8 is 10, not a length of the set: a block drafter's next lengths are 12, then 15."""
    blocks, tokens = DraftLength(8, 16, blocks=True), DraftLength(8, 16)
    for expected in (12, 15, 15):
        blocks.follow(blocks.current, blocks.current)
        tokens.follow(tokens.current, tokens.current)
        assert blocks.current == expected and tokens.current == 8
    blocks.follow(15, 3)
    assert blocks.current == 12 and DraftLength(15, 16, blocks=True).plan(100).num_draft == 15
