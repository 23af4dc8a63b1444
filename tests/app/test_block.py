"""The app with a block drafter (DFlash): its directory loads as any drafter directory does, beside a
tiny Qwen3.5 target (a hybrid, as every published DFlash target is), and its answers are the target's
own greedy tokens, with the drafts the target accepted counted and highlighted as drafts: in a
session, across turns and a swap to plain decoding and back, after a restart from the prompt cache on
disk, and in a pilot started as `specmlx-chat --target DIR --drafter DFLASH_DIR` starts it."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import pytest
from rich.control import strip_control_codes

from app.app import SpecApp
from app.loader import ModelChoice, load_session
from app.session import Finished, Session, Started, Streamed
from app.settings import ChatSettings
from app.tally import Tally
from app.widgets.answer import AnswerView
from app.widgets.stats import StatsPanel
from specmlx.diskcache.blocks import BLOCK
from specmlx.drafters import NONE, NoDrafter
from specmlx.drafters.block import BlockDrafter
from specmlx.events import Source
from specmlx.hidden import embed, output_head
from specmlx.policy import DraftPolicy

from .. import tiny_block, tiny_hybrid
from .helpers import answered, chat_ready, run, send

DFLASH = "dflash"  # the drafter directory's name: the drafter's name in the app
SETTINGS = ChatSettings(max_tokens=24, policy=DraftPolicy(num_draft=4))  # greedy, drafting every round
LEANED = "e"  # the token the target leans on: a letter, shown as soon as it is emitted
LEAN = 6.0  # its head row scaled by this: about one answer token in four is an "e"


def leaning_target(vocab: int, token: int):
    """A tiny Qwen3.5 target of the 8 layers the tiny drafters read, its head's row for `token`
    scaled up so that it emits that token often (a random target of a 320-token vocabulary seldom
    repeats itself: a drafter that always proposes one token would almost never be right)."""
    target = tiny_hybrid.tiny_qwen3_5(vocab, seed=1, layers=tiny_block.LAYERS)
    head = target.language_model.lm_head.weight
    row = mx.arange(vocab)[:, None] == token
    target.load_weights([("language_model.lm_head.weight", mx.where(row, LEAN * head, head))], strict=False)
    mx.eval(target.parameters())
    return target


def mask_guessing(target, vocab: int, token: int) -> int:
    """A mask token whose own embedding, normed, the target's head reads as `token`: a drafter built
    with it (`tiny_block.tiny_dflash(guesses=...)`) proposes `token` at every position."""
    rows = embed(target, mx.arange(vocab))
    normed = rows * mx.rsqrt(mx.mean(rows * rows, axis=-1, keepdims=True) + 1e-6)
    return mx.argmax(output_head(target, normed), axis=-1).tolist().index(token)


@pytest.fixture(scope="module")
def block_dirs(tmp_path_factory, tokenizer, vocab) -> dict[str, Path]:
    """A target directory and a DFlash drafter directory of the published layout beside it."""
    root = tmp_path_factory.mktemp("block")
    leaned = tokenizer.convert_tokens_to_ids(LEANED)
    target = leaning_target(vocab, leaned)
    model, raw = tiny_block.tiny_dflash(vocab, seed=2, guesses=mask_guessing(target, vocab, leaned))
    return {"target": tiny_hybrid.save_qwen3_5(target, vocab, tokenizer, root / "target"),
            "drafter": tiny_block.save_dflash(model, raw, root / DFLASH)}


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch) -> Path:
    """The prompt cache on disk of this test alone: the tests share the target directory it is keyed by."""
    path = tmp_path / "cache"
    monkeypatch.setenv("SPECMLX_CACHE_DIR", str(path))
    return path


def block_session(dirs: dict[str, Path], disk_cache: bool = False, progress=lambda step: None) -> Session:
    return load_session(ModelChoice(str(dirs["target"]), str(dirs["drafter"]), disk_cache), progress)


def answer(session: Session, text: str, settings: ChatSettings = SETTINGS) -> list:
    return list(session.stream(text, settings))


def tokens(updates: list) -> list[int]:
    return [e.token for u in updates if isinstance(u, Streamed) for e in u.round.tokens]


def alone(dirs: dict[str, Path], history, text: str, settings: ChatSettings = SETTINGS) -> list:
    """The same turn answered by the target alone: the same directory loaded with `--drafter none`."""
    plain = load_session(ModelChoice(str(dirs["target"]), NONE, disk_cache=False))
    assert isinstance(plain.engine.drafter, NoDrafter)
    plain.reset(history)
    return answer(plain, text, settings)


def check_drafted(updates: list) -> None:
    """Drafted by the block drafter, some drafts accepted, and each accepted one reported as a draft:
    what the app highlights and its tally counts."""
    started, *rest, finished = updates
    assert isinstance(started, Started) and isinstance(finished, Finished)
    assert started.drafter == finished.stats.drafter == DFLASH
    rounds = [u.round for u in rest if isinstance(u, Streamed)]
    drafts = [e for r in rounds for e in r.tokens if e.source is Source.DRAFT]
    stats, tally = finished.stats, Tally.of(rounds)
    assert 0 < stats.accepted < stats.drafted and len(drafts) == stats.accepted
    assert (tally.rounds, sum(tally.accepted_per_round), tally.tokens) == (stats.rounds, stats.accepted,
                                                                           stats.generation_tokens)
    assert max(tally.draft_lengths) == 4 and all(r.blocked for r in rounds if r.drafted)


def test_a_block_drafter_directory_loads_as_any_drafter_directory(block_dirs, monkeypatch):
    """Warmed up too, as on a GPU: every draft length the first answers may use, run once."""
    monkeypatch.setenv("SPECMLX_WARM_UP", "1")
    steps = []
    session = block_session(block_dirs, progress=steps.append)
    drafter = session.engine.drafter
    assert isinstance(drafter, BlockDrafter) and drafter.name == DFLASH
    assert drafter.target is session.engine.target  # attached to the target it reads
    assert session.default_drafter == DFLASH and session.drafters.names == (DFLASH, "ngram", "none")
    assert session.target_name == "target"
    assert [s.split()[:2] for s in steps] == [["checking", "target"], ["loading", "target"], ["loading", "drafter"],
                                              ["warming", "up"], ["ready"]]
    assert steps[2].startswith(f"loading drafter {DFLASH}") and steps[3].endswith(f"with {DFLASH}")


def test_its_turns_are_the_targets_own_greedy_answers_with_accepted_drafts(block_dirs):
    """Three turns, each reusing the last one's caches; before the third, plain decoding of the
    second's prompt (the baseline) swaps the block drafter out, and the answer swaps it back in."""
    session = block_session(block_dirs)
    for i, text in enumerate(("def add(a, b):", "for i in range(10):", "and then?")):
        if i == 2:
            session.measure_baseline()
            assert isinstance(session.engine.drafter, NoDrafter)
        history = list(session.history)
        updates = answer(session, text)
        assert isinstance(session.engine.drafter, BlockDrafter)
        expected = alone(block_dirs, history, text)
        assert tokens(updates) == tokens(expected) and tokens(updates)
        assert updates[-1].text == expected[-1].text
        check_drafted(updates)
        assert i == 0 or updates[0].reused > 0


def test_a_chat_reopened_after_a_restart_continues_from_the_disk(block_dirs, cache_dir):
    """The target's caches and the block drafter's context rows are kept on disk and restored: the
    next answer prefills only its new turn, and is the target's own, drafted."""
    system = "You are a careful assistant who answers in one line. " * 12
    settings = ChatSettings(max_tokens=16, system=system, policy=DraftPolicy(num_draft=4))
    first = block_session(block_dirs, disk_cache=True)
    answer(first, "The quick brown fox", settings)
    first.close()
    kept = [name for f in cache_dir.rglob("*.safetensors") for name in mx.load(str(f))]
    assert any(name.startswith(f"drafter.{DFLASH}") for name in kept)
    again = block_session(block_dirs, disk_cache=True)
    again.reset(first.history)
    updates = answer(again, "jumps over the lazy dog", settings)
    again.close()
    expected = alone(block_dirs, first.history, "jumps over the lazy dog", settings)
    assert updates[0].reused > BLOCK and expected[0].reused == 0  # the system prompt and the first turn, from disk
    assert tokens(updates) == tokens(expected)
    check_drafted(updates)


def test_the_app_started_with_a_block_drafter_highlights_its_accepted_drafts(block_dirs):
    """As `specmlx-chat --target DIR --drafter DFLASH_DIR`: the answer on screen is the target's own,
    each accepted draft styled as a draft, and the panel shows the block drafter's acceptance."""
    seen = {}

    async def scenario():
        app = SpecApp(target=str(block_dirs["target"]), drafter=str(block_dirs["drafter"]), settings=SETTINGS,
                      cursor_blink=False)
        async with app.run_test(size=(110, 34)) as pilot:
            await chat_ready(pilot)
            assert app.screen.sub_title == f"target · drafter {DFLASH}"
            await send(pilot, "def add(a, b):")
            await answered(pilot)
            assert not app.screen.query(".error")
            view = app.screen.query_one(AnswerView)
            styles, text = view.token_styles(), view.styled_text()
            shown = [(strip_control_codes(e.text), styles[e.source]) for e in view.events]
            assert [(text.plain[s.start:s.end], s.style) for s in text.spans] == [x for x in shown if x[0]]
            assert any(s.style == styles[Source.DRAFT] for s in text.spans)  # drafts shown as drafts
            seen["events"], seen["figures"] = list(view.events), app.screen.query_one(StatsPanel).figures
            seen["draft style"] = styles[Source.DRAFT]
            seen["other styles"] = {styles[s] for s in Source if s is not Source.DRAFT}
    run(scenario)
    expected = alone(block_dirs, [], "def add(a, b):")
    events, figures = seen["events"], seen["figures"]
    assert [e.token for e in events] == tokens(expected)
    drafts = [e for e in events if e.source is Source.DRAFT]
    assert drafts and seen["draft style"] not in seen["other styles"]  # accepted drafts, and they look it
    assert figures.drafter == DFLASH and figures.finished and figures.tokens == len(events)
    assert figures.acceptance is not None and figures.acceptance > 0
    assert sum(figures.accepted_per_round) == len(drafts) and max(figures.draft_lengths) == 4
