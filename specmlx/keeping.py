"""An engine and the prompt cache on disk, tied by what stands above both (a server's slots, the chat app).

The engine knows nothing of the disk and the disk nothing of the engine: here the keeper is handed what
the engine's caches hold (`Engine.capture`) and the engine what the keeper found (`Engine.restore`).
What a hybrid target's prefill completes is kept block by block as it passes (its recurrent state is
held only there); a transformer's blocks are kept after the answer, once its drafter's caches are
filled too.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Hashable, Sequence

from .diskcache.blocks import BLOCK
from .diskcache.keeper import Keeper
from .diskcache.store import first_line
from .engine import Engine

log = logging.getLogger("specmlx.diskcache")


def restore(keeper: Keeper, engine: Engine, owner: Hashable, prompt: Sequence[int],
            shareable: int | None = None) -> int:
    """Before `owner`'s request: bring `engine` to hold the longest prefix of `prompt` its owner kept (where
    that gains enough, `Keeper.found`), and have its prefills keep their blocks for `owner` (within
    `shareable` tokens, if given); how many more it holds (0: none came from disk)."""
    watch(keeper, engine, owner, shareable)
    if not engine.cache.keepable:
        return 0
    held = engine.reusable(prompt)
    blocks = keeper.found(owner, prompt, held)
    if not blocks:
        return 0
    try:
        return max(0, engine.restore(prompt, blocks) - held)
    except Exception as err:  # noqa: BLE001 - what the caches held may be gone: they hold nothing
        log.warning("disk cache: a kept prefix could not be restored, so it is prefilled: %s", first_line(err))
        engine.forget(0)
        return 0


def keep(keeper: Keeper, engine: Engine, owner: Hashable, asked: int, shareable: int | None = None) -> None:
    """After `owner`'s answer: queue what `engine` holds that the disk lacks (`Keeper.keep`); `asked`: its
    last prompt's length."""
    if engine.cache.keepable:
        keeper.keep(owner, engine.context[: engine.cache_length()], engine.capture, asked, shareable)


def watch(keeper: Keeper, engine: Engine, owner: Hashable, shareable: int | None = None) -> None:
    """Have a hybrid target's prefills keep each block for `owner` as they complete it (`Keeper.keep_prefilled`)."""
    hybrid = engine.cache.keepable and engine.cache.rewindable
    engine.on_prefilled = partial(keeper.keep_prefilled, owner, engine.capture, shareable=shareable) if hybrid else None
    engine.prefill_block = BLOCK if hybrid else None
