"""Pilot helpers: wait for a condition instead of sleeping a guessed time."""

from __future__ import annotations

import asyncio
from time import monotonic
from typing import Awaitable, Callable

from textual.pilot import Pilot


async def wait_until(pilot: Pilot, predicate: Callable[[], bool], timeout: float = 15.0, what: str = "") -> None:
    """Let the app run until `predicate()` holds; fail after `timeout` seconds."""
    deadline = monotonic() + timeout
    while not predicate():
        if monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        await pilot.pause(0.01)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    """Run an async pilot scenario from a plain test (no async test plugin needed).

    asyncio.run also waits for the app's thread workers, so the test sees
    their last writes."""
    asyncio.run(scenario())


async def chat_ready(pilot: Pilot, timeout: float = 15.0) -> None:
    """Wait for the chat screen, mounted: its prompt has the focus, so keys reach it."""
    from app.screens.chat import ChatScreen

    def ready() -> bool:
        focused = pilot.app.focused
        return isinstance(pilot.app.screen, ChatScreen) and focused is not None and focused.id == "prompt"
    await wait_until(pilot, ready, timeout, what="the chat screen")
    await pilot.pause()


async def send(pilot: Pilot, text: str) -> None:
    """Type into the prompt and press Enter."""
    prompt = pilot.app.screen.query_one("#prompt")
    prompt.value = text
    await pilot.press("enter")


async def answered(pilot: Pilot, count: int = 1) -> None:
    """Wait until `count` answers are on screen and the chat is idle again."""
    from app.widgets.answer import AnswerView

    screen = pilot.app.screen
    await wait_until(
        pilot, lambda: len(screen.query(AnswerView)) >= count and not screen.busy
        and all(a.finished for a in screen.query(AnswerView)), what=f"{count} finished answers",
    )


async def reopen_newest(pilot: Pilot) -> None:
    """Open the newest saved chat from the history (ctrl+o, Enter)."""
    from app.widgets.answer import AnswerView

    await pilot.press("ctrl+o")
    await wait_until(pilot, lambda: pilot.app.screen.query("#conversations"), what="the history")
    await pilot.press("enter")
    await wait_until(pilot, lambda: pilot.app.screen.query(AnswerView), what="the reopened chat")


def drafter_button(screen, name: str):
    """The settings screen's entry for the drafter called `name`."""
    from app.widgets.drafter_list import ChosenButton

    return next(b for b in screen.query(ChosenButton) if b.name == name)
