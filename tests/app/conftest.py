"""App test fixtures: the history goes to a temporary directory, engines are tiny or scripted."""

from __future__ import annotations

import copy
from typing import Callable

import pytest
from mlx_lm.tokenizer_utils import TokenizerWrapper

from specmlx.drafters import ModelDrafter
from specmlx.engine import Engine
from specmlx.events import RoundEvent, TokenEvent

from .. import tiny
from .fakes import FakeEngine


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    """Never touch the user's real history."""
    path = tmp_path / "data"
    monkeypatch.setenv("SPECMLX_DATA_DIR", str(path))
    return path


@pytest.fixture(scope="session")
def wrapped(tokenizer) -> TokenizerWrapper:
    return TokenizerWrapper(tokenizer)


# Gemma's check, as its chat template makes it: roles must alternate, starting with the user.
TURN_CHECK = (
    "{% for m in messages | rejectattr('role', 'equalto', 'system') %}"
    "{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% endfor %}"
)


@pytest.fixture(scope="session")
def turn_checking(tokenizer) -> TokenizerWrapper:
    """The test tokenizer with a chat template that refuses turns out of order, as Gemma's does."""
    strict = copy.deepcopy(tokenizer)
    strict.chat_template = TURN_CHECK + tiny.CHAT_TEMPLATE
    return TokenizerWrapper(strict)


class RecordingEngine(Engine):
    """The real engine; keeps every round it reported, generation by generation."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rounds: list[list[RoundEvent]] = []

    def tokens(self, generation: int = -1) -> list[TokenEvent]:
        """The tokens of one generation's rounds, in order."""
        return [t for event in self.rounds[generation] for t in event.tokens]

    def generate(self, prompt, config=None):
        generation = super().generate(prompt, config) if config else super().generate(prompt)
        rounds: list[RoundEvent] = []
        self.rounds.append(rounds)
        inner = generation._rounds

        def record():
            try:
                for event in inner:
                    rounds.append(event)
                    yield event
            finally:
                inner.close()  # runs the engine's cleanup: rewind, stats
        generation._rounds = record()
        return generation


@pytest.fixture
def tiny_engine(target, noisy_drafter, vocab, wrapped) -> Callable[[], RecordingEngine]:
    """Builds (on the app's MLX thread) a real engine on the tiny models, noisy drafter."""
    return lambda: RecordingEngine(target, ModelDrafter(noisy_drafter, vocab, name="noisy"), wrapped)


@pytest.fixture
def fake_engine(wrapped) -> Callable[..., FakeEngine]:
    return lambda *args, **kwargs: FakeEngine(wrapped, *args, **kwargs)
