"""Rows that draft with one small model share its forwards: one a step for all of them."""

from __future__ import annotations

from specmlx.batch import Batch, Member
from specmlx.caches.stream import make_cache
from specmlx.drafters import ModelDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.policy import DraftPolicy

PROMPTS = [[5, 6, 7, 8, 9], [11, 12, 13], [20, 21, 22, 23, 24, 25, 26]]


class Counting:
    """A drafter model that counts its forwards and the rows each one ran."""

    def __init__(self, model) -> None:
        self.model, self.calls = model, []

    def __call__(self, tokens, cache=None):
        self.calls.append(tokens.shape[0])
        return self.model(tokens, cache=cache)

    def __getattr__(self, name):  # its layers, for making its cache
        return getattr(self.model, name)


def members(target, drafter, vocab, policy: DraftPolicy) -> list[Member]:
    config = GenerationConfig(max_tokens=12, policy=policy)
    return [Member(Engine(target, ModelDrafter(drafter, vocab), eos_token_ids=[]), p, config) for p in PROMPTS]


def test_rows_of_one_drafter_model_draft_in_one_forward_a_step(target, noisy_drafter, vocab):
    counting = Counting(noisy_drafter)
    batch = Batch(target, len(make_cache(target)))
    for member in members(target, counting, vocab, DraftPolicy(num_draft=3)):
        batch.add(member)
    counting.calls.clear()  # the prefills ran a row at a time, in each slot's own cache
    batch.step()
    assert counting.calls == [3, 3, 3]  # three steps, each one forward of the three rows
    assert len(batch.shared) == 1


def test_a_row_that_stops_drafts_on_a_p_min_drafts_on_its_own(target, noisy_drafter, vocab):
    counting = Counting(noisy_drafter)
    batch = Batch(target, len(make_cache(target)))
    for member in members(target, counting, vocab, DraftPolicy(num_draft=3, p_min=0.2)):
        batch.add(member)
    counting.calls.clear()
    batch.step()
    assert not batch.shared and set(counting.calls) == {1} and len(counting.calls) >= 3
