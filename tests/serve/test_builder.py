"""The builder: one server of loaded models, its defaults and its slot count."""

from __future__ import annotations

from specmlx.policy import DraftPolicy
from specmlx.serve.builder import MAX_BATCH, build
from specmlx.serve.limits import Access
from specmlx.serve.serving import Defaults
from specmlx.serve.slots import MAX_SLOTS, MIN_SLOTS


def test_the_builder_serves_the_loaded_models_the_first_drafter_by_default(loaded):
    mlx, target, drafters = loaded
    built = build(mlx, target, list(drafters.values()), policy=DraftPolicy(num_draft=2), max_tokens=9,
                  access=Access(("k",)), cache_bytes=1 << 40)
    serving = built.app.state.serving
    assert serving.worker is built.worker and serving.access.api_keys == ("k",)
    assert serving.defaults == Defaults(target.name, "drafter", DraftPolicy(num_draft=2), max_tokens=9)
    assert serving.loaded == ("drafter", "mtp", "ngram", "none") == tuple(built.worker.slots.drafters)
    assert built.worker.slots.count == MAX_SLOTS  # no count given: as many as the cache bytes hold
    # Each request of a batch needs a slot: the default count is at least the batch size.
    assert build(mlx, target, list(drafters.values()), cache_bytes=1).worker.slots.count == MAX_BATCH
    assert build(mlx, target, list(drafters.values()), cache_bytes=1, max_batch=1).worker.slots.count == MIN_SLOTS
    assert build(mlx, target, list(drafters.values()), slots=3, cache_bytes=1).worker.slots.count == 3
