"""specmlx's block drafter against mlx-vlm's DFlash drafter (0.7.10: `mlx_vlm.speculative.drafters.
qwen3_dflash`), the same weights on the same tiny Qwen3.5 target (a hybrid, as every published DFlash
target is): at every round of greedy drafting, over rounds whose drafts were partly accepted, the
block's logits agree and so do its tokens.

Both run the whole trained block each round, as z-lab's reference does (`dflash/model.py`: the
verify width is the block size); mlx-vlm shrinks its block where drafts stop being accepted, which
changes every position's proposal (the block attends to all of itself), so it is driven at the full
block here. The target's features are taken by hooks on its layers' outputs, apart from the taps the
engine uses, and the two are checked to agree.
"""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.cache import KVCache, make_prompt_cache
from mlx_vlm.speculative.drafters.dflash2.config import DFlash2Config
from mlx_vlm.speculative.drafters.dflash2.dflash2 import DFlash2DraftModel
from mlx_vlm.speculative.drafters.dspark.config import DSparkConfig
from mlx_vlm.speculative.drafters.dspark.dspark import DSparkDraftModel
from mlx_vlm.speculative.drafters.qwen3_dflash.config import DFlashConfig
from mlx_vlm.speculative.drafters.qwen3_dflash.dflash import DFlashDraftModel

from specmlx.drafters.block import BlockDrafter
from specmlx.hidden import decoder_taps, head, inner_model
from specmlx.models.dflash import load_block_drafter
from specmlx.sampling import SamplingParams

from .. import tiny_block, tiny_hybrid

VOCAB = 128
PROMPT = [(7 * i + 3) % VOCAB for i in range(40)]
# How many drafts each round keeps: forced, so every rewind depth shows though random layers seldom
# guess the random target's tokens; the token after them is the target's own.
ACCEPTED = [2, 0, 15, 1, 6, 0, 3]
PROPOSALS = tiny_block.BLOCK - 1
ATOL = 1e-4


class _Out:
    """A target layer that keeps what leaves it."""

    def __init__(self, layer, sink: list) -> None:
        self._layer, self._sink = layer, sink

    def __call__(self, *args, **kwargs):
        out = self._layer(*args, **kwargs)
        self._sink.append(out)
        return out

    def __getattr__(self, name):
        return getattr(self._layer, name)


def verify(target, tokens: list[int], start: int, layers=tiny_block.TAPPED) -> tuple[mx.array, list[int]]:
    """The target on `tokens` from scratch: what leaves `layers` at positions start.. (n, T, H), and
    its greedy choices there (a fresh prefill stands in for a rewound hybrid cache)."""
    inner, sink = inner_model(target), []
    originals = list(inner.layers)
    try:
        for i in layers:
            inner.layers[i] = _Out(originals[i], sink)
        hidden = inner(mx.array([tokens]), cache=make_prompt_cache(target))
    finally:
        inner.layers[:] = originals
    return mx.stack(sink, axis=2)[0, start:], mx.argmax(head(target, hidden[0, start:]), axis=-1).tolist()


# A sliding-window layer beside a full one (z-lab's Qwen3.5-9B drafter has them), its window short of
# the context so that it cuts; causal, where mlx-vlm and z-lab's reference agree (below). mlx-vlm keeps
# a sliding layer's context in a rotating cache, whose one-token update returns its buffer rotated,
# not in order of position, and its windowed mask reads that buffer as if in order: after a round
# that accepted nothing its block saw the wrong keys (logits 1.15 apart, measured). z-lab's reference
# masks by position, as specmlx does; given plain caches, mlx-vlm's attention agrees exactly.
SLIDING = {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 8}
LAYOUTS = {"full": {}, "sliding": SLIDING, "dflash2": {"dflash2": True}, "dspark": {"dspark": True}}


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def pair(request, tmp_path_factory):
    target = tiny_hybrid.tiny_qwen3_5(VOCAB, seed=11, layers=tiny_block.LAYERS)
    model, raw = tiny_block.tiny_dflash(VOCAB, seed=12, **LAYOUTS[request.param])
    if request.param == "sliding":
        raw["dflash_config"]["causal"] = True
    folder = tiny_block.save_dflash(model, raw, tmp_path_factory.mktemp("dflash"))
    return target, folder, raw


def theirs(target, folder, raw) -> DFlashDraftModel:
    """mlx-vlm's drafter of the checkpoint's kind, bound to the target by DFlash's `bind` (DFlash2's
    first checks for mlx-vlm's own speculative cache rollback, which mlx-lm's targets lack)."""
    if "DFlash2DraftModel" in raw["architectures"]:
        model = DFlash2DraftModel(DFlash2Config.from_dict(raw))
    elif raw["dflash_config"].get("projector_type") == "dspark":
        model = DSparkDraftModel(DSparkConfig.from_dict(raw))
    else:
        model = DFlashDraftModel(DFlashConfig.from_dict(raw))
    weights = model.sanitize(dict(mx.load(str(folder / "model.safetensors"))))
    model.load_weights(list(weights.items()), strict=True)
    mx.eval(model.parameters())
    return DFlashDraftModel.bind(model, target)


def run_rounds(target, folder, raw):
    """Greedy rounds by specmlx's drafter and mlx-vlm's from the same verified features: each round's
    tokens and block logits, specmlx's then mlx-vlm's."""
    mine = BlockDrafter(load_block_drafter(folder), VOCAB, "dflash")
    mine.attach(target, [])
    vlm = theirs(target, folder, raw)
    vlm_cache = [KVCache() for _ in vlm.layers]  # not its rotating caches: see SLIDING
    logged: dict[str, list[mx.array]] = {"mine": [], "theirs": []}
    my_logits, their_logits = mine.model.logits, vlm._logits
    mine.model.logits = lambda x: logged["mine"].append(my_logits(x)) or logged["mine"][-1]
    vlm._logits = lambda x: logged["theirs"].append(their_logits(x)) or logged["theirs"][-1]

    taps, choices = verify(target, PROMPT, 0)
    tokens = PROMPT + [choices[-1]]
    mine.observe(0, None, taps)
    context = taps  # the rows mlx-vlm has not seen yet
    out = []
    for accepted in ACCEPTED:
        a = mine.draft(tokens, PROPOSALS, SamplingParams(), mx.random.key(0)).tokens.tolist()
        flat = context.reshape(1, context.shape[0], -1)
        b = vlm.draft_block(tokens[-1], flat, vlm_cache, tiny_block.BLOCK, lambda x: mx.argmax(x, axis=-1))[0].tolist()
        out.append((a, b, logged["mine"][-1], logged["theirs"][-1]))
        start = len(tokens) - 1
        taps, choices = verify(target, tokens + a, start)
        tokens += a[:accepted] + [choices[accepted]]
        mine.observe(start, None, taps)
        mine.rewind(len(tokens) - 1)
        context = taps[: accepted + 1]
    return out


def test_block_logits_and_tokens_agree_at_every_round(pair):
    rounds = run_rounds(*pair)
    for mine, theirs_, my_logits, their_logits in rounds:
        assert len(mine) == PROPOSALS and mine == theirs_
        assert my_logits.shape == (PROPOSALS, VOCAB)
        assert mx.allclose(my_logits.reshape(-1), their_logits.reshape(-1), atol=ATOL).item()


def test_the_engines_taps_are_what_leaves_the_layers_read(pair):
    """`BlockDrafter.fused_layers` names the layers whose input is what leaves the ones it reads."""
    target, folder, _ = pair
    drafter = BlockDrafter(load_block_drafter(folder), VOCAB, "dflash")
    _, taps = decoder_taps(target, mx.array([PROMPT]), make_prompt_cache(target), drafter.fused_layers)
    hooked, _ = verify(target, PROMPT, 0)
    assert mx.allclose(taps[0], hooked, atol=1e-5).item()


def test_causal_unsaid_is_true_of_sliding_layers_alone_as_z_labs_reference_has_it(tmp_path):
    """z-lab's reference (`dflash/model.py`, `Qwen3DFlashAttention`): a layer is causal when the config
    says so, and when it says nothing, exactly when it slides; its window masks keys as far before a
    query as after it. mlx-vlm 0.7.10 reads an unsaid `causal` as false for every layer. specmlx
    follows z-lab, and the block's logits show the difference."""
    target = tiny_hybrid.tiny_qwen3_5(VOCAB, seed=11, layers=tiny_block.LAYERS)
    logits, causal_layers = {}, {}
    for causal in (None, True, False):
        model, raw = tiny_block.tiny_dflash(VOCAB, seed=12, **SLIDING)
        if causal is not None:
            raw["dflash_config"]["causal"] = causal
        drafter = BlockDrafter(load_block_drafter(tiny_block.save_dflash(model, raw, tmp_path / str(causal))),
                               VOCAB, "dflash")
        drafter.attach(target, [])
        causal_layers[causal] = [layer.self_attn.causal for layer in drafter.model.layers]
        kept, mine = [], drafter.model.logits
        drafter.model.logits = lambda x: kept.append(mine(x)) or kept[-1]
        taps, choices = verify(target, PROMPT, 0)
        drafter.observe(0, None, taps)
        drafter.draft(PROMPT + [choices[-1]], PROPOSALS, SamplingParams(), mx.random.key(0))
        logits[causal] = kept[-1]
    assert causal_layers == {None: [True, False], True: [True, True], False: [False, False]}
    assert not mx.allclose(logits[None], logits[False], atol=1e-2).item()
    assert not mx.allclose(logits[None], logits[True], atol=1e-2).item()
