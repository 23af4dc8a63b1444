"""Heads that fuse target layers (EAGLE-3 style) in a batch: one forward taps every layer some row's
head fuses, and each row's head is shown its own layers, exactly as when it runs alone."""

from __future__ import annotations

from specmlx.batch import Member
from specmlx.drafters.mtp import MTPDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.policy import DraftPolicy
from tests import tiny
from tests.test_golden_generations import PROMPT, VOCAB, models

from ..drafters.test_mtp import assert_fed_the_fusion, fused_head
from ..test_engine import reference_greedy
from .test_batch import serve

LAYERS = ((0, 1), (1,), (0,), ())  # every row a different set: the batch taps their union


def test_rows_with_heads_fusing_different_layers_are_each_fed_their_own():
    target, args = models().target, tiny.qwen2_args(VOCAB)  # the arguments the target was built with
    members = []
    for i, layers in enumerate(LAYERS):
        head = fused_head(args, layers, seed=3 + i)
        engine = Engine(target, MTPDrafter(head, VOCAB), eos_token_ids=[])
        members.append(Member(engine, PROMPT[: 8 + 5 * i], GenerationConfig(max_tokens=18,
                                                                          policy=DraftPolicy(num_draft=3))))
    served = serve(target, members, join_every=2)
    assert served.most == len(LAYERS)
    for i, m in enumerate(members):
        prompt = PROMPT[: 8 + 5 * i]
        assert served.tokens[i] == reference_greedy(target, prompt, 18), LAYERS[i]
        drafter = m.engine.drafter
        if drafter.fused_layers:
            assert_fed_the_fusion(drafter, target, prompt + served.tokens[i])
    assert any("draft" in sources for sources in served.sources.values())  # some drafts were accepted

