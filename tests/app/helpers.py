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


async def chat_ready(pilot: Pilot) -> None:
    from app.screens.chat import ChatScreen

    await wait_until(pilot, lambda: isinstance(pilot.app.screen, ChatScreen), what="the chat screen")
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
