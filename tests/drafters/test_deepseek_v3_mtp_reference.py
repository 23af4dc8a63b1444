"""specmlx's DeepSeek-V3 MTP layer (`models/deepseek_v3_mtp.py`) against mlx-vlm's one drafter of the
same structure: `glm_moe_dsa_mtp`, GLM-5's (enorm, hnorm, eh_proj on [embedding, hidden], one decoder
block of the target's kind, the shared head's norm). Its block is DeepSeek-V3.2's, MLA and DeepSeek-V3's
MoE plus a lightning indexer that keeps every key up to `index_topk`: on shorter sequences it is
DeepSeek-V3's block. The same weights on a tiny DeepSeek-V3 target: draft logits and tokens at T=0 agree
at every draft step, round after round (the drivers of test_native_mtp_reference.py).

mlx-vlm differs from specmlx in two conventions, where specmlx keeps vLLM's (`deepseek_mtp.py`,
`glm4_moe_mtp.py`; Hugging Face's modelling code does not run these layers): mlx-vlm does not zero the
token embedding at the layer's position 0, and it chains the shared head's normed output into the next
step, where vLLM chains the block's output and only the logits see the norm. Aligned, they agree; each
left as mlx-vlm has it shows. mlx-vlm scores with the target's head: DeepSeek-V3's shared head is a copy.
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
from .vlm_mtp import chain_before_norm, glm_moe_dsa, weights_of, zero_first_embedding

INDEX_TOPK = 256  # above every length the rounds reach: the indexer keeps every key


@pytest.fixture(scope="module")
def pair():
    target = tiny_hybrid.tiny_deepseek_v3(VOCAB, seed=11)
    mtp = tiny_hybrid.tiny_deepseek_v3_mtp(target, seed=12)
    mtp.shared_head.head.weight = target.lm_head.weight
    return target, mtp


def reference(target, mtp, aligned: tuple[str, ...] = ("zero", "chain")):
    vlm = glm_moe_dsa(target, weights_of(mtp), INDEX_TOPK)
    if "zero" in aligned:
        zero_first_embedding(vlm)
    if "chain" in aligned:
        chain_before_norm(vlm)
    return vlm


def test_drafts_and_logits_agree_at_every_step(pair):
    assert_agree(run_rounds(*pair, reference(*pair), rebuild=True))


def test_mlx_vlm_chaining_the_normed_output_differs_from_the_second_step_on(pair):
    """The first step reads the target's hidden state, as specmlx's does; the later ones do not."""
    far = apart(run_rounds(*pair, reference(*pair, aligned=("zero",)), rebuild=True))
    assert far[0][0] < ATOL and min(max(steps[1:]) for steps in far) > 1e-2


def test_mlx_vlm_reading_the_first_token_differs_from_the_first_step_on(pair):
    far = apart(run_rounds(*pair, reference(*pair, aligned=("chain",)), rebuild=True))
    assert far[0][0] > 1e-2


def test_hugging_faces_layout_is_read_as_mlx_vlm_reads_it(pair):
    """`model.layers.{N}.*`, experts one tensor each and MLA's `kv_b_proj` fused: specmlx's sanitize
    (mlx-lm's DeepSeek-V3 rules) and mlx-vlm's GLM-5 splitter give the same tensors."""
    target, mtp = pair
    config = tiny_hybrid.deepseek_v3_config(VOCAB)
    layer = config["num_hidden_layers"]
    stored = hugging_faces_deepseek_v3_mtp(mtp, layer)
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
