"""mlx-vlm's Gemma 4 target and assistant drafter, holding specmlx's weights,
drafting as Hugging Face's candidate generator does: the reference that
test_gemma4_reference.py checks specmlx's drafter against.

mlx-vlm is a separate implementation of both networks (its own attention,
RoPE, norms, KV sharing and centroid head); only the round's conventions are
set here, to HF's (transformers 5.23: generation/candidate_generator.py
`SinglePositionMultiTokenCandidateGenerator`, models/gemma4_assistant).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Sequence

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_vlm.models.gemma4.config import TextConfig
from mlx_vlm.models.gemma4.language import LanguageModel
from mlx_vlm.speculative.drafters.gemma4_assistant import Model, ModelConfig

SLIDING = "sliding_attention"


def target(mlx_lm_target: nn.Module, args) -> LanguageModel:
    """mlx-vlm's Gemma 4 language model with the weights of mlx-lm's `mlx_lm_target`.

    Only its hidden states and K/V are read, so the untied head the tiny
    targets use (mlx-vlm's ties it) is left out.
    """
    model = LanguageModel(TextConfig.from_dict(dataclasses.asdict(args)))
    weights = {k: v for k, v in tree_flatten(mlx_lm_target.parameters()) if not k.startswith("lm_head.")}
    model.load_weights(list(model.sanitize(weights).items()), strict=True)
    mx.eval(model.parameters())
    return model


def assistant(config: dict, weights: dict[str, mx.array], bound_to: LanguageModel) -> Model:
    """mlx-vlm's assistant drafter from an HF-layout config.json and checkpoint tensors.

    Its own sliding mask is switched off (a window wider than any test
    context): `hf_state` hands it the sliding keys HF's mask keeps instead.
    """
    raw = copy.deepcopy(config)
    raw["text_config"]["sliding_window"] = 1 << 30
    model = Model(ModelConfig.from_dict(raw))
    model.load_weights(list(model.sanitize(weights).items()), strict=True)
    mx.eval(model.parameters())
    return model.bind(bound_to)


def hf_state(target: LanguageModel, context: Sequence[int], window: int) -> tuple[mx.array, dict]:
    """What HF hands its assistant for a round over `context` (bonus token last):
    the target's final-normed hidden state at the last scored position, and the
    K/V of positions 0..n-2 of the last cache-owning layer of each type."""
    out = target(mx.array([context[:-1]]), cache=target.make_cache(), return_hidden=True, return_shared_kv=True)
    hidden = target.speculative_draft_hidden(out.hidden_states[-1][:, -1:])  # mlx-vlm collects it pre-norm
    kv = dict(out.shared_kv_states)
    # HF's assistant flips a bidirectional window mask allowing |distance| <= window
    # from the newest key: it reads the last window + 1 sliding keys.
    keys, values = kv[SLIDING]
    kv[SLIDING] = (keys[..., -(window + 1):, :], values[..., -(window + 1):, :])
    return hidden, kv


def draft(model: Model, target: LanguageModel, context: Sequence[int], num_draft: int,
          window: int) -> list[tuple[int, mx.array]]:
    """Greedy drafts for `context` as (token, full-vocabulary logits) per step."""
    hidden, kv = hf_state(target, context, window)
    scored = len(context) - 1
    # HF: position_ids = input_ids.shape[1] - 1, the bonus token's position, for every
    # step; mlx-vlm's own round loop would pass scored - 1 (`_mtp_draft_position`).
    model.set_shared_kv(kv, kv_offset=scored, position=scored, kv_valid_len=scored)
    steps = []

    def argmax(logits: mx.array) -> mx.array:
        token = mx.argmax(logits[:, -1:, :], axis=-1)
        steps.append((token.item(), logits[0, -1]))
        return token

    # block size counts the bonus token: num_draft + 1 verifies num_draft drafts
    model.draft_block(context[-1], hidden, None, num_draft + 1, argmax, greedy=False)
    return steps
