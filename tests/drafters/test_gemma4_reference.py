"""specmlx's Gemma 4 assistant drafter against mlx-vlm's (vlm_gemma4.py), the
same random weights in both and each drafter reading its own library's
target: every draft step of every round of a real generation must give the
same logits and the same token.

Verification keeps a wrong drafter exact, so only a check like this one shows
a wrong scale, norm, KV layer, RoPE or centroid head before real weights do
(as low acceptance). The targets have the real configs' structure in
miniature: sliding and full layers with different head dims, proportional
partial RoPE on the full ones, shared K/V in the last layers, per-layer
inputs, a window the prompts cross; k_eq_v full layers for the dense head.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from specmlx.drafters.gemma4_assistant import Gemma4AssistantDrafter
from specmlx.engine import Engine

from .. import tiny
from ..test_engine import run
from . import vlm_gemma4 as reference

# HF (transformers 5.23) and specmlx put the query at the bonus token's position; mlx-vlm's loop one earlier.
WINDOW = 8
NUM_DRAFT = 4
PROMPT_LENGTHS = (WINDOW + 5, 3 * WINDOW)  # both cross the window
NEW_TOKENS = 12  # a round each at least, as random drafts are mostly rejected
# Of the logits' scale. Both sides are float32, but each target computes its
# hidden states and K/V in differently shaped matmuls (specmlx's in verify
# chunks, the reference in one prefill), which OpenBLAS (preloaded under
# pytest) sums in different orders, and each draft step feeds back the last.
TOLERANCE = 1e-3


@dataclass(frozen=True)
class Case:
    vocab: int
    ordered: bool  # the centroid head, else the tied dense head
    k_eq_v: bool  # the target's full layers use K as V
    head: dict = field(default_factory=dict)  # centroid-head sizes
    accepts: bool = False  # drafts are right often enough for rounds to start after accepts


CASES = {
    "dense-k_eq_v": Case(64, ordered=False, k_eq_v=True),  # 26B/31B
    "centroids": Case(64, ordered=True, k_eq_v=False),  # E2B/E4B
    "centroids-accepting": Case(8, ordered=True, k_eq_v=False, head=dict(centroids=2, top_k=1), accepts=True),
}


@dataclass
class Round:
    context: list[int]
    steps: list[tuple[int, mx.array]] = field(default_factory=list)  # (token, logits) per draft step


class Recording(Gemma4AssistantDrafter):
    """specmlx's drafter, recording what each step of each round produced."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rounds: list[Round] = []

    def draft(self, tokens, num_draft, sampling, key, p_min=0.0):
        self.rounds.append(Round(list(tokens)))
        return super().draft(tokens, num_draft, sampling, key, p_min)

    def _step(self, kv, position, token, h, greedy):
        scores, h = super()._step(kv, position, token, h, greedy)
        mx.eval(scores.token, scores.scores)
        self.rounds[-1].steps.append((scores.token.item(), scores.scores))
        return scores, h


def jitter_unit_weights(model):
    """Norm weights and layer scalars start at one, where leaving one out changes
    nothing: move them off it, so that it would."""
    mx.random.seed(2)
    ones = [(k, v) for k, v in tree_flatten(model.parameters()) if k.endswith(("norm.weight", "layer_scalar"))]
    model.load_weights([(k, v * (1 + 0.3 * mx.random.normal(v.shape))) for k, v in ones], strict=False)
    mx.eval(model.parameters())
    return model


def build(case: Case) -> tuple:
    """specmlx's target and assistant, and mlx-vlm's holding the same weights."""
    args = tiny.gemma4_args(case.vocab, window=WINDOW)
    if case.k_eq_v:
        args.attention_k_eq_v, args.num_global_key_value_heads = True, 1
    target = tiny.gemma4_target(args, seed=0)
    assistant = jitter_unit_weights(tiny.gemma4_assistant(args, seed=1, ordered=case.ordered, **case.head))
    config = tiny.gemma4_assistant_config(args, ordered=case.ordered, **case.head)
    theirs_target = reference.target(target, args)
    theirs = reference.assistant(config, assistant.weights(), theirs_target)
    return target, assistant, theirs_target, theirs


def generate(target, assistant, vocab: int) -> tuple[Recording, int]:
    """Greedy generation over the prompts with specmlx; the recorded rounds and accepted drafts."""
    drafter = Recording(assistant, vocab)
    engine = Engine(target, drafter, eos_token_ids=[])
    rng = np.random.default_rng(0)
    accepted = 0
    for length in PROMPT_LENGTHS:
        _, stats = run(engine, rng.integers(0, vocab, length).tolist(), max_tokens=NEW_TOKENS, num_draft=NUM_DRAFT)
        accepted += stats.accepted
    return drafter, accepted


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_every_draft_step_equals_mlx_vlms(case):
    target, assistant, theirs_target, theirs = build(case)
    drafter, accepted = generate(target, assistant, case.vocab)
    rounds = [r for r in drafter.rounds if r.steps]
    assert sum(len(r.steps) == NUM_DRAFT for r in rounds) >= len(PROMPT_LENGTHS) * NUM_DRAFT
    assert all(len(r.context) > WINDOW + 1 for r in rounds)  # the sliding layers' window is full
    assert (accepted > 0) == case.accepts
    for r in rounds:
        assert_round_equals_mlx_vlms(r, theirs, theirs_target)


def assert_round_equals_mlx_vlms(r: Round, theirs, theirs_target) -> None:
    """Each of the round's draft steps gives mlx-vlm's token and logits for the same context."""
    expected = reference.draft(theirs, theirs_target, r.context, len(r.steps), WINDOW)
    for step, ((token, logits), (their_token, their_logits)) in enumerate(zip(r.steps, expected)):
        where = f"context of {len(r.context)}, step {step}"
        assert token == their_token, where
        # The centroid head leaves unscored tokens at -inf here; HF and mlx-vlm
        # fill them with min(scored) - 1 (same argmax, same scored logits).
        scored = mx.isfinite(logits)
        fill = mx.where(scored, their_logits, mx.inf).min() - 1
        error = mx.abs(mx.where(scored, logits, fill) - their_logits).max()
        assert error.item() <= TOLERANCE * mx.abs(their_logits).max().item(), where
