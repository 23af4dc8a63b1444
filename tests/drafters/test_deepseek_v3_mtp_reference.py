"""specmlx's DeepSeek-V3 MTP layer (`models/deepseek_v3_mtp.py`) against mlx-vlm's one drafter of the
same structure: `glm_moe_dsa_mtp`, GLM-5's (enorm, hnorm, eh_proj on [embedding, hidden], one decoder
block of the target's kind, the shared head's norm). Its block is DeepSeek-V3.2's, MLA and DeepSeek-V3's
MoE plus a lightning indexer that keeps every key up to `index_topk`: on shorter sequences it is
DeepSeek-V3's block. The same weights on a tiny DeepSeek-V3 target: draft logits and tokens at T=0 agree
at every draft step, round after round (the drivers of test_native_mtp_reference.py, with the same one
convention apart: mlx-vlm keeps the entries its drafting wrote). mlx-vlm scores with the target's head,
Hugging Face's `MtpModel` too: DeepSeek-V3's shared head is a copy of it.
"""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten
from mlx_vlm.speculative.drafters.glm_moe_dsa_mtp.split import GlmMoeDsaMTPSplitter

from specmlx.models.deepseek_v3_mtp import sanitize

from .. import tiny_hybrid
from ..test_loading import hugging_faces_deepseek_v3_mtp
from .test_native_mtp_reference import ATOL, VOCAB, apart, assert_agree, run_rounds
from .vlm_mtp import glm_moe_dsa, weights_of

INDEX_TOPK = 256  # above every length the rounds reach: the indexer keeps every key


@pytest.fixture(scope="module")
def pair():
    target = tiny_hybrid.tiny_deepseek_v3(VOCAB, seed=11)
    mtp = tiny_hybrid.tiny_deepseek_v3_mtp(target, seed=12)
    mtp.shared_head.head.weight = target.lm_head.weight
    return target, mtp


def test_drafts_and_logits_agree_at_every_step(pair):
    assert_agree(run_rounds(*pair, glm_moe_dsa(pair[0], weights_of(pair[1]), INDEX_TOPK), rebuild=True))


def test_mlx_vlm_keeping_its_drafted_entries_drifts(pair):
    far = [max(steps) for steps in apart(run_rounds(*pair, glm_moe_dsa(pair[0], weights_of(pair[1]), INDEX_TOPK),
                                                    rebuild=False))]
    assert far[0] < ATOL and max(far) > 1e-2


def test_hugging_faces_layout_is_read_as_mlx_vlm_reads_it(pair):
    """`model.layers.{N}.*`, experts one tensor each and MLA's `kv_b_proj` fused: specmlx's sanitize
    (mlx-lm's DeepSeek-V3 rules) and mlx-vlm's GLM-5 splitter give the same tensors."""
    target, mtp = pair
    config = tiny_hybrid.deepseek_v3_config(VOCAB)
    stored = hugging_faces_deepseek_v3_mtp(mtp, config["num_hidden_layers"])
    splitter = GlmMoeDsaMTPSplitter()
    theirs = splitter.rename(dict(stored), config)
    splitter.postprocess(theirs, config)
    mine = sanitize(dict(stored), target.args, config)
    named = {"shared_head.norm.weight": "mtp.shared_head_norm.weight"}
    mine = {named.get(k, "mtp." + k.removeprefix("block.")): v for k, v in mine.items()}
    assert sorted(mine) == sorted(k for k in theirs if not k.endswith("embed_tokens.weight"))
    for k, v in mine.items():
        assert mx.array_equal(v, theirs[k]), k
    assert len(mine) == len(tree_flatten(mtp.parameters()))
