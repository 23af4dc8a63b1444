"""Which slot a request takes, and what slots give back when their caches grow too large."""

from __future__ import annotations

from specmlx.engine import GenerationConfig
from specmlx.serve.slots import Slots


def run(mlx, slot, prompt: list[int], tokens: int = 6) -> None:
    mlx.call(lambda: list(slot.engine.generate(prompt, GenerationConfig(max_tokens=tokens))))


def test_a_conversation_returns_to_its_slot_and_another_takes_an_empty_one(loaded):
    mlx, target, drafters = loaded
    slots = mlx.call(Slots, target.model, target.tokenizer, drafters, 2)
    a, b = list(range(40, 60)), [40, 41] + list(range(100, 130))  # b shares only a short start with a
    first = mlx.call(slots.take, a, "drafter")
    run(mlx, first, a)
    assert mlx.call(slots.take, b, "drafter") is not first
    run(mlx, slots._slots[1], b)
    continued = a + first.engine.context[len(a):] + [7, 8]
    again = mlx.call(slots.take, continued, "ngram")
    assert again is first
    assert again.engine.reusable(continued) >= len(a)
    assert again.engine.drafter is first.drafters["ngram"]
    # A drafter that reads hidden states needs them for the whole context: the slot is kept,
    # its target cache cut back for the prefill (Engine.use).
    assert mlx.call(slots.take, continued, "mtp") is first and first.engine.drafter is first.drafters["mtp"]


def test_a_third_conversation_takes_the_least_recently_used_slot(loaded):
    mlx, target, drafters = loaded
    slots = mlx.call(Slots, target.model, target.tokenizer, drafters, 2)
    prompts = [list(range(s, s + 20)) for s in (30, 60, 90)]
    held = []
    for prompt in prompts[:2]:
        held.append(mlx.call(slots.take, prompt, "ngram"))
        run(mlx, held[-1], prompt)
    mlx.call(slots.take, prompts[0] + held[0].engine.context[20:], "ngram")  # the first is used again
    assert mlx.call(slots.take, prompts[2], "ngram") is held[1]


def test_slots_over_the_memory_cap_are_emptied_oldest_first(loaded):
    mlx, target, drafters = loaded
    slots = mlx.call(Slots, target.model, target.tokenizer, drafters, 2, 1)  # one byte: nothing idle is kept
    one = mlx.call(slots.take, list(range(50, 80)), "drafter")
    run(mlx, one, list(range(50, 80)))
    two = mlx.call(slots.take, list(range(150, 180)), "drafter")
    run(mlx, two, list(range(150, 180)))
    assert all(n > 0 for n in slots.contexts())
    mlx.call(slots.trim, two)  # the one in use is kept
    assert slots.contexts()[slots._slots.index(two)] > 0
    assert sorted(slots.contexts())[0] == 0
    assert one not in slots._slots
