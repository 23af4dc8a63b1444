"""A checkpoint's own MTP layers in a batch (DeepSeek-V3's: its target has no recurrent layers, which
the batch refuses): rows joining and leaving each commit the target's own greedy tokens, with drafts
accepted."""

from __future__ import annotations

from specmlx.batch import Member
from specmlx.drafters.native_mtp import NativeMTPDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.policy import DraftPolicy
from tests import tiny_hybrid

from ..test_engine_hybrid import PROMPT, VOCAB, greedy_alone
from .test_batch import serve


def test_rows_drafting_with_deepseek_v3s_mtp_layer_commit_the_targets_own_tokens():
    target = tiny_hybrid.tiny_deepseek_v3(VOCAB, seed=1)
    mtp = tiny_hybrid.tiny_deepseek_v3_mtp(target, seed=2, guesses=True)
    prompts = [PROMPT[: 6 + 3 * i] + [i + 1] for i in range(4)]
    members = [Member(Engine(target, NativeMTPDrafter(mtp, VOCAB), eos_token_ids=[]), prompt,
                      GenerationConfig(max_tokens=10 + 4 * i, policy=DraftPolicy(num_draft=3)))
               for i, prompt in enumerate(prompts)]
    served = serve(target, members, join_every=2)
    assert served.most > 1
    for i, prompt in enumerate(prompts):
        assert served.tokens[i] == greedy_alone(target, prompt, 10 + 4 * i)
    assert any("draft" in sources for sources in served.sources.values())  # some drafts were accepted
