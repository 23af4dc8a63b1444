"""SVG snapshots at a fixed terminal size, cursor blink off, with a scripted engine.

Compared with the committed files under tests/app/snapshots/. After a change
to the look of the app, regenerate them and review the diff:

    SPECMLX_UPDATE_SNAPSHOTS=1 python -m pytest tests/app/test_snapshots.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.app import SpecApp
from app.session import Session

from .fakes import FakeDrafter
from .helpers import answered, chat_ready, run, send, wait_until

SNAPSHOTS = Path(__file__).parent / "snapshots"
SIZE = (110, 34)


def matches(app: SpecApp, name: str) -> None:
    svg = app.export_screenshot(title="specmlx")
    path = SNAPSHOTS / f"{name}.svg"
    if os.environ.get("SPECMLX_UPDATE_SNAPSHOTS") == "1":
        path.write_text(svg, encoding="utf-8")
        return
    if not path.exists():
        pytest.fail(f"no snapshot {path}; create it with SPECMLX_UPDATE_SNAPSHOTS=1")
    if svg != path.read_text(encoding="utf-8"):
        actual = path.with_suffix(".actual.svg")
        actual.write_text(svg, encoding="utf-8")
        pytest.fail(f"{name} differs from {path}; see {actual} (SPECMLX_UPDATE_SNAPSHOTS=1 accepts it)")


@pytest.fixture
def demo_app(fake_engine):
    def make() -> SpecApp:
        engine = fake_engine(drafter=FakeDrafter("demo-drafter"))
        return SpecApp(engine_factory=lambda: Session(engine, target_name="demo-target"), cursor_blink=False)
    return make


def test_empty_chat(demo_app):
    async def scenario():
        app = demo_app()
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            matches(app, "empty_chat")
    run(scenario)


@pytest.mark.parametrize("view", ["highlighted", "markdown"])
def test_finished_answer(demo_app, view):
    async def scenario():
        app = demo_app()
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            await send(pilot, "Write a Python function that checks whether a number is prime.")
            await answered(pilot)
            if view == "markdown":
                await pilot.press("ctrl+r")
            await pilot.pause()
            matches(app, f"answer_{view}")
    run(scenario)


def test_settings_screen(demo_app):
    async def scenario():
        app = demo_app()
        async with app.run_test(size=SIZE) as pilot:
            await chat_ready(pilot)
            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda: app.screen.query("#settings-grid"), what="the settings screen")
            await pilot.pause()
            matches(app, "settings")
    run(scenario)
