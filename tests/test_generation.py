"""A generation's loop (`generation.py`): a plain round runs ahead of its sync in one process only."""

from __future__ import annotations

from specmlx.drafters import NoDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.peers import ALONE, Alone
from specmlx.policy import DraftPolicy

from .test_engine import PROMPTS, reference_greedy


class InStep(Alone):
    """Peers as a lockstep's are to the loop: other processes scoring in step (and here, none)."""

    @property
    def one_process(self) -> bool:
        return False


def test_a_plain_round_looks_ahead_only_when_nothing_is_kept_in_step(tokenizer, target):
    prompt = tokenizer.encode(PROMPTS[0])
    for peers, looks_ahead in ((ALONE, True), (InStep(), False)):
        engine = Engine(target, NoDrafter(), eos_token_ids=[], peers=peers)
        generation = engine.generate(prompt, GenerationConfig(max_tokens=6, policy=DraftPolicy(num_draft=0)))
        emitted, ahead = [], []
        for event in generation:
            emitted += [t.token for t in event.tokens]
            ahead.append(engine.cache.length == len(engine.context))  # the next forward already fed
        assert ahead == [looks_ahead] * 5 + [False]  # the last round has no next one to start
        assert emitted == reference_greedy(target, prompt, 6)
