"""The app object itself: what it holds on to once it has exited."""

from __future__ import annotations

import gc
import weakref

from app.app import SpecApp
from app.settings import ChatSettings
from specmlx.drafters import ModelDrafter
from specmlx.engine import Engine

from .helpers import answered, chat_ready, run, send


def test_the_models_are_freed_when_the_app_exits(target, noisy_drafter, vocab, wrapped):
    """A test suite (or a script) that runs the app keeps the App object; the
    models must not stay loaded with it (the real pair is gigabytes)."""
    engines = []

    def factory():
        # Copies of the tiny models, so only this app can hold them.
        engines.append(Engine(type(target)(target.args), ModelDrafter(type(noisy_drafter)(noisy_drafter.args), vocab),
                              wrapped))
        engines[-1].target.update(target.parameters())
        return engines[-1]

    async def scenario(app):
        async with app.run_test(size=(100, 30)) as pilot:
            await chat_ready(pilot)
            await send(pilot, "hi")
            await answered(pilot)

    app = SpecApp(engine_factory=factory, settings=ChatSettings(max_tokens=16), cursor_blink=False)
    run(lambda: scenario(app))
    engine = weakref.ref(engines.pop())
    gc.collect()
    assert engine() is None, [type(r).__name__ for r in gc.get_referrers(engine())]
    app.close_resources()  # what `specmlx-chat` calls after run(): still safe
