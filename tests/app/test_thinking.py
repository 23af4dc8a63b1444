"""A thinking model's reasoning found in an answer's text (`app/thinking.py`)."""

from __future__ import annotations

import pytest

from app.thinking import Thinking, split_thought, thinking_of

QWEN = Thinking("<think>", "</think>")
OPENED = Thinking("<think>", "</think>", inside=True)  # Qwen3.5's template opens the block in the prompt


def parts(text: str, thinking: Thinking | None) -> tuple[str, str] | None:
    found = split_thought(text, thinking)
    return None if found is None else (text[found[0]], text[found[1]])


@pytest.mark.parametrize("text, thinking, expected", [
    ("<think>\nplan\n</think>\n\nHi", QWEN, ("plan", "Hi")),
    ("plan\n</think>\n\nHi", OPENED, ("plan", "Hi")),
    ("plan so far", OPENED, ("plan so far", "")),  # still thinking
    ("<think>\nplan", QWEN, ("plan", "")),
    ("plan</think>Hi", QWEN, ("plan", "Hi")),  # a reopened answer: its prompt opened the block
    ("Hi", QWEN, None),
    ("Use <think> tags, then </think>.", QWEN, None),  # markers inside an answer are its text
    ("<think>plan</think>Hi", None, None),  # a model that does not think
])
def test_the_reasoning_and_the_answer_lie_apart(text, thinking, expected):
    assert parts(text, thinking) == expected


def test_a_model_without_think_markers_has_none(tokenizer):
    assert thinking_of(tokenizer) is None


def test_the_markers_and_the_opened_block_come_from_the_tokenizer_and_the_prompt():
    class Thinks:
        has_thinking, think_start, think_end = True, "<think>", "</think>"

        def rfind_think_start(self, ids):
            return max((i for i, t in enumerate(ids) if t == 1), default=-1)

        def rfind_think_end(self, ids):
            return max((i for i, t in enumerate(ids) if t == 2), default=-1)

    assert thinking_of(Thinks(), [5, 1]) == OPENED
    assert thinking_of(Thinks(), [5, 1, 7, 2]) == QWEN
    assert thinking_of(Thinks()) == QWEN
