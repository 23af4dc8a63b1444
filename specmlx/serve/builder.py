"""The builder: one server of loaded models, made in one place for the command line, the bench and the tests.

`build` makes its slots (`slots.py`), its worker (`worker.py`), what serves each route (`serving.py`)
and the FastAPI app: its error handlers (`errors.py`), the checks in front of every route
(`limits.py`) and the routes (`routes.py`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Sequence

from fastapi import FastAPI

from ..diskcache.keeper import Keeper
from ..drafters import Drafter
from ..grammar import grammar_tokenizer
from ..loading import LoadedModel
from ..mlx_thread import MLXThread
from ..policy import DraftPolicy
from ..prompting import plain_encoder
from ..sampling import SamplingParams
from ..caches.kinds import KVBits
from ..errors import SpecmlxError
from ..vision.tower import VisionTower
from ..vocab import vocab_size
from . import routes
from .aliases import Aliases
from .errors import install
from .fim import find_layout
from .limits import Access, guard
from .mirror import NO_MIRROR, Mirror
from .serving import Defaults, Serving
from .slots import Slots, slots_for
from .worker import Worker

MAX_BATCH = 8  # requests decoded at once by default: an editor's autocomplete, chat and an agent's calls


@dataclass(frozen=True)
class Built:
    """A server ready to run: its FastAPI app, and the worker behind it (to stop, close and watch)."""

    app: FastAPI
    worker: Worker
    vision: VisionTower | None = None  # the target's vision tower, if requests' images are read


def build(mlx: MLXThread, target: LoadedModel, drafters: Sequence[Drafter], *,
          policy: DraftPolicy = DraftPolicy(), sampling: SamplingParams = SamplingParams(), max_tokens: int = 512,
          access: Access = Access(), slots: int | None = None, cache_bytes: int = 4 << 30, max_queue: int = 32,
          mirror: Mirror = NO_MIRROR, max_batch: int = MAX_BATCH, disk: Keeper | None = None,
          memory_bytes: int | None = None, vision: VisionTower | None = None, kv: KVBits | None = None) -> Built:
    """A server of models `mlx` loaded: `slots` kept conversations (None: as many as `cache_bytes`
    holds), caches within `cache_bytes`, a worker on `mlx`, and the app. The first drafter is the
    default; `policy`, `sampling` and `max_tokens` are what a request leaves unset. `mirror`: who
    else keeps the slots and runs each job (a sharded target's other ranks; none by default).
    `max_batch`: requests decoded at once (one at a time with a mirror); each needs a slot, so
    the default slot count is at least that. `disk`: the prompt cache on disk (None: off); the
    worker closes it. `memory_bytes`: the most MLX may hold, weights included; a request is
    admitted only when its whole context fits (`admission.py`; None: unchecked). `vision`: the target's
    vision tower (`vision.tower`), with which requests' images are read (None: images are refused). `kv`: the
    target's keys and values kept quantized (`--kv-bits`), in its slots and in the batch alike."""
    if kv is not None:
        reading = [d.name for d in drafters if d.reads_target_cache]
        if reading:  # every request naming it would be refused: say so once, at start
            raise SpecmlxError(f"drafter {', '.join(reading)} reads the target's keys and values, which --kv-bits "
                               "keeps quantized; drop --kv-bits or that drafter")
    named = {d.name: d for d in drafters}
    if slots is None:  # every slot keeps its drafters' caches and hidden states as well as the target's cache
        slots = max(mlx.call(slots_for, target.model, drafters, cache_bytes, kv), max_batch)
    pool = mlx.call(Slots, target.model, target.tokenizer, named, slots, cache_bytes, mirror, disk=disk,
                    memory_limit=memory_bytes, kv=kv)
    worker = Worker(pool, max_queue, mlx, max_batch=max_batch)
    defaults = Defaults(target.name, drafters[0].name, policy, sampling, max_tokens)
    app = FastAPI(title="specmlx", docs_url=None, redoc_url=None, openapi_url=None)
    install(app)
    guard(app, access)
    app.state.serving = Serving(worker, defaults, access, target.tokenizer, vocab_size(target.model),
                                tuple(named), int(time.time()), find_layout(target.tokenizer),
                                plain_encoder(target.tokenizer), Aliases(target.name), vision)
    routes.include(app)
    if getattr(target.tokenizer, "backend_tokenizer", None) is not None:
        # The grammar engine's view of the vocabulary takes a second or two: made now, beside loading,
        # so that the first request with a response_format does not wait for it.
        eos = frozenset(target.tokenizer.eos_token_ids)  # the slots' engines end answers at these
        threading.Thread(target=grammar_tokenizer, args=(target.tokenizer, vocab_size(target.model), eos),
                         name="grammar-vocabulary", daemon=True).start()
    return Built(app, worker, vision)
