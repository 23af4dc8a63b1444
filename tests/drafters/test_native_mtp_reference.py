"""specmlx's native MTP drafter against mlx-vlm's (`vlm_mtp.py`), the same weights on the same
tiny Qwen3.5, Qwen3.5-MoE or Nemotron-H (MoE) target: draft logits and tokens at T=0 agree at every draft step, over a
prompt long enough that the target's Gated DeltaNet state carries it, round after round.

Where they part: after a round whose drafts were partly accepted, mlx-vlm keeps the MTP cache
entries its drafting wrote for the accepted drafts (built from the MTP's own features), while
specmlx rebuilds them from the target's verified hidden states, as vLLM's MTP proposer does
(Hugging Face's modelling code ignores `mtp.*`). The rounds below are driven both ways: the
reference with those entries rebuilt agrees exactly; left as mlx-vlm leaves them, it drifts.
"""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.cache import make_prompt_cache

from specmlx.drafters.native_mtp import NativeMTPDrafter
from specmlx.drafters.loop import Scores
from specmlx.hidden import decoder, head
from specmlx.sampling import SamplingParams

from .. import tiny_hybrid
from .vlm_mtp import Recorded, drafter as vlm_drafter, drop_drafted, weights_of

VOCAB = 128
PROMPT = [(7 * i + 3) % VOCAB for i in range(48)]
NUM_DRAFT = 4
# How many drafts each round keeps: forced, so every rewind depth shows though random layers
# seldom guess the random target's tokens; the token after them is the target's own.
ACCEPTED = [2, 0, 4, 1, 3, 0, 4, 2]
ATOL = 1e-4


CONFIGS = {"qwen3_5": (tiny_hybrid.tiny_qwen3_5, lambda v: tiny_hybrid.qwen3_5_config(v)["text_config"]),
           "qwen3_5_moe": (tiny_hybrid.tiny_qwen3_5_moe, lambda v: tiny_hybrid.qwen3_5_moe_config(v)["text_config"]),
           "nemotron_h": (tiny_hybrid.tiny_nemotron_h_moe, tiny_hybrid.nemotron_h_moe_config)}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request):
    build, config = CONFIGS[request.param]
    target = build(VOCAB, seed=11)
    if request.param == "nemotron_h":
        return target, tiny_hybrid.tiny_nemotron_h_mtp(target, seed=12), config(VOCAB)
    return target, tiny_hybrid.tiny_native_mtp(target, seed=12), config(VOCAB)


class Mine:
    """specmlx's drafter, with each draft step's logits kept."""

    def __init__(self, target, mtp):
        self.drafter = NativeMTPDrafter(mtp, VOCAB)
        self.drafter.attach(target, [])
        self.logits: list[mx.array] = []
        step = self.drafter._step

        def recording(ids, hidden, greedy):
            scores, features = step(ids, hidden, greedy)
            self.logits.append(scores.logits)
            return scores, features

        self.drafter._step = recording


def verify(target, tokens: list[int], start: int) -> tuple[mx.array, list[int]]:
    """The target on `tokens` from scratch: its final hidden states (n - start, H) and greedy
    choices at positions start.. (a fresh prefill stands in for a rewound cache)."""
    hidden = decoder(target, mx.array([tokens]), make_prompt_cache(target))[0, start:]
    return hidden, mx.argmax(head(target, hidden), axis=-1).tolist()


def run_rounds(target, mtp, vlm, rebuild: bool):
    """Rounds of greedy drafting by specmlx's drafter and mlx-vlm's `vlm` (holding the same weights) from
    the same verified hidden states: each round's drafted tokens and draft logits, specmlx's then mlx-vlm's."""
    mine, theirs = Mine(target, mtp), Recorded(vlm)
    hidden, choices = verify(target, PROMPT, 0)
    tokens = PROMPT + [choices[-1]]
    mine.drafter.observe(0, hidden)
    vlm.prefill_from_target_hidden(mx.array([PROMPT]), hidden[None], tokens[-1], None, greedy=True)
    out = []
    for accepted in ACCEPTED:
        a = mine.drafter.draft(tokens, NUM_DRAFT, SamplingParams(), mx.random.key(0)).tokens.tolist()
        b = vlm.draft_block(tokens[-1], None, None, NUM_DRAFT + 1, None, greedy=True)[0].tolist()
        out.append((a, b, mine.logits[-NUM_DRAFT:], theirs.logits[-NUM_DRAFT:]))
        start = len(tokens) - 1
        hidden, choices = verify(target, tokens + a, start)  # specmlx's drafts (where they agree, the same)
        tokens += a[:accepted] + [choices[accepted]]
        mine.drafter.observe(start, hidden)
        mine.drafter.rewind(len(tokens) - 1)
        if rebuild:
            drop_drafted(vlm)
        vlm.accept_verified_tokens(hidden[None], mx.array([b]), accepted, [tokens[-1]], None, greedy=True)
    return out


def reference_rounds(target, mtp, text_config: dict, rebuild: bool):
    return run_rounds(target, mtp, vlm_drafter(text_config, weights_of(mtp), target), rebuild)


def assert_agree(rounds) -> None:
    """Every round's drafted tokens equal, and every draft step's logits within ATOL."""
    for mine, theirs, my_logits, their_logits in rounds:
        assert mine == theirs
        for x, y in zip(my_logits, their_logits):
            assert mx.allclose(x.reshape(-1), y.reshape(-1), atol=ATOL).item()


def apart(rounds) -> list[list[float]]:
    """How far the two drafters' logits are, by round and draft step."""
    return [[float(mx.abs(x.reshape(-1) - y.reshape(-1)).max()) for x, y in zip(r[2], r[3])] for r in rounds]


def test_drafts_and_logits_agree_at_every_step(pair):
    assert_agree(reference_rounds(*pair, rebuild=True))


def test_mlx_vlm_keeping_its_drafted_entries_drifts(pair):
    """The one convention they differ on (module docstring): at least one later round's logits differ."""
    far = [max(steps) for steps in apart(reference_rounds(*pair, rebuild=False))]
    assert far[0] < ATOL and max(far) > 1e-2


def test_hugging_faces_layout_is_read_as_mlx_vlm_reads_it(pair):
    """Qwen3.5 / Qwen3-Next: `mtp.*` names with zero-centred norms (and, for the MoE, one tensor an expert's projection as
    Qwen3-Next ships or a fused `gate_up_proj` as Qwen3.5 does): the same tensors as mlx-vlm's sanitize."""
    from specmlx.models.qwen3_5_mtp import sanitize

    target, mtp, text_config = pair
    if text_config["model_type"] == "nemotron_h":
        pytest.skip("Nemotron-H's layout: test_nemotron_h_layout_is_read_as_mlx_vlm_reads_it")
    hf = {f"mtp.{k}": v - 1.0 if k.endswith(tiny_hybrid.MTP_NORMS) else v for k, v in weights_of(mtp).items()}
    fused = {}
    for k, v in hf.items():  # Qwen3.5-MoE's fused experts
        if ".switch_mlp.gate_proj.weight" in k:
            base = k.replace(".switch_mlp.gate_proj.weight", "")
            fused[f"{base}.experts.gate_up_proj"] = mx.concatenate([v, hf[f"{base}.switch_mlp.up_proj.weight"]], axis=-2)
            fused[f"{base}.experts.down_proj"] = hf[f"{base}.switch_mlp.down_proj.weight"]
        elif ".switch_mlp." not in k:
            fused[k] = v
    split = {}
    for k, v in hf.items():  # Qwen3-Next's experts, one tensor each
        if ".switch_mlp." in k:
            base, projection = k.split(".switch_mlp.")
            split.update({f"{base}.experts.{e}.{projection}": v[e] for e in range(v.shape[0])})
        else:
            split[k] = v
    reference = vlm_drafter(text_config, weights_of(mtp), target)
    for layout in (fused, split):
        theirs = reference.sanitize(dict(layout))
        mine = sanitize(layout, shift_norms=True)
        assert sorted(mine) == sorted(theirs)
        for k in mine:
            assert mx.array_equal(mine[k], theirs[k]), k
        assert all(mx.allclose(mine[k], v, atol=1e-6) for k, v in weights_of(mtp).items())


def test_nemotron_h_layout_is_read_as_mlx_vlm_reads_it():
    """Nemotron-H's `mtp.*` tensors, experts one tensor each and attention's K/V scales beside them:
    the same tensors as mlx-vlm's sanitize (which reads them with the prefix already split off)."""
    from specmlx.models.nemotron_h_mtp import sanitize

    target = tiny_hybrid.tiny_nemotron_h_moe(VOCAB, seed=11)
    mtp = tiny_hybrid.tiny_nemotron_h_mtp(target, seed=12)
    stored = {"layers.0.mixer.k_proj.k_scale": mx.array(1.0)}
    for k, v in weights_of(mtp).items():
        if ".switch_mlp." in k:
            base, name = k.split(".switch_mlp.")
            projection = {"fc1.weight": "up_proj.weight", "fc2.weight": "down_proj.weight"}[name]
            stored.update({f"{base}.experts.{e}.{projection}": v[e] for e in range(v.shape[0])})
        else:
            stored[k] = v
    reference = vlm_drafter(tiny_hybrid.nemotron_h_moe_config(VOCAB), weights_of(mtp), target)
    theirs = reference.sanitize(dict(stored))
    mine = sanitize({f"mtp.{k}": v for k, v in stored.items()})
    assert sorted(mine) == sorted(theirs) == sorted(weights_of(mtp))
    for k in mine:
        assert mx.array_equal(mine[k], theirs[k]) and mx.array_equal(mine[k], weights_of(mtp)[k]), k
