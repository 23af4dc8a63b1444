"""A pair is checked (tokenizers, then memory) before any weights load."""

import dataclasses
import json

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten

from specmlx import loading, memory
from specmlx.drafters.native_mtp import NativeMTPDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.errors import SpecmlxError
from specmlx.peers import ALONE
from specmlx.policy import DraftPolicy

from . import tiny, tiny_hybrid
from .test_engine_hybrid import greedy_alone


@pytest.fixture
def no_memory(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 0)


@pytest.fixture
def other_family(tmp_path):
    """A drafter with a tokenizer of its own: every id means something else."""
    other = tiny.train_tokenizer(vocab_size=300)
    args = tiny.qwen2_args(len(other), hidden=32)
    return tiny.save_model(tiny.build(args, seed=3), args, other, tmp_path / "other")


def test_a_drafter_of_another_family_is_refused_before_the_memory_check(model_dirs, other_family, no_memory):
    with pytest.raises(SpecmlxError, match=r"drafter \S*other cannot draft for target \S*target: their vocabularies differ"):
        loading.check_pair(str(model_dirs["target"]), loading.DrafterSource(str(other_family), "other"))


def test_a_matching_pair_that_does_not_fit_is_refused_without_loading(model_dirs, no_memory, monkeypatch):
    monkeypatch.setattr(loading, "load", lambda *a, **k: pytest.fail("weights were loaded"))
    with pytest.raises(SpecmlxError, match="only 0.0 GB is available"):
        loading.load_pair(str(model_dirs["target"]), str(model_dirs["drafter"]))


def test_a_matching_pair_loads_reporting_each_step_under_short_names(model_dirs):
    steps = []
    target, drafter = loading.load_pair(str(model_dirs["target"]), str(model_dirs["drafter"]), steps.append)
    assert target.path == model_dirs["target"] and (target.name, drafter.name) == ("target", "drafter")
    assert steps == ["checking target + drafter", f"loading target target ({model_dirs['target']})",
                     f"loading drafter drafter ({model_dirs['drafter']})"]


def test_one_load_for_a_drafter_named_two_ways(model_dirs):
    loaded = loading.load_models(str(model_dirs["target"]),
                                 [str(model_dirs["drafter"]), str(model_dirs["drafter"]), "ngram"])
    assert loaded.drafters[0] is loaded.drafters[1] and loaded.drafters[2].name == "ngram"
    assert loaded.peers is ALONE  # one process: nothing to keep in step with


def test_display_names(models_root_for_names):
    preset_dir = models_root_for_names / "qwen2.5-coder-1.5b"
    assert loading.display_name(str(preset_dir / "mtp")) == "mtp"
    assert loading.display_name(str(preset_dir / "target")) == "qwen2.5-coder-1.5b"
    assert loading.display_name("/somewhere/My-Model-4bit") == "My-Model-4bit"
    assert loading.display_name("mlx-community/Qwen2.5-0.5B-4bit") == "mlx-community/Qwen2.5-0.5B-4bit"
    assert loading.display_name("ngram") == "ngram" and loading.display_name("gemma-3-270m") == "gemma-3-270m"


@pytest.fixture
def models_root_for_names(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECMLX_MODELS", str(tmp_path))
    return tmp_path


def test_a_broken_tokenizer_is_one_line(model_dirs, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    with pytest.raises(SpecmlxError, match=r"broken: cannot load its tokenizer"):
        loading.check_pair(str(model_dirs["target"]), loading.DrafterSource(str(broken), "broken"))


def test_mtp_style_heads_load_by_their_config_and_draft(tmp_path, tokenizer, target, target_args, model_dirs, capsys):
    """Heads ship no tokenizer: they are recognised by model_type and checked on attach."""
    import json

    import mlx.core as mx

    from specmlx.generate import main
    from specmlx.drafters.gemma4_assistant import Gemma4AssistantDrafter
    from specmlx.drafters.mtp import MTPDrafter
    from specmlx.models.mtp import save_mtp

    save_mtp(tiny.mtp(target_args, seed=2), tmp_path / "mtp")
    _, drafter = loading.load_pair(str(model_dirs["target"]), str(tmp_path / "mtp"))
    assert isinstance(drafter, MTPDrafter)

    g_args = tiny.gemma4_args(len(tokenizer))
    g_target = tiny.save_model(tiny.gemma4_target(g_args, seed=1), g_args, tokenizer, tmp_path / "g4")
    assistant = tiny.gemma4_assistant(g_args, seed=2)
    (tmp_path / "g4a").mkdir()
    mx.save_safetensors(str(tmp_path / "g4a" / "model.safetensors"), assistant.weights())
    (tmp_path / "g4a" / "config.json").write_text(json.dumps(tiny.gemma4_assistant_config(g_args)))
    _, drafter = loading.load_pair(str(g_target), str(tmp_path / "g4a"))
    assert isinstance(drafter, Gemma4AssistantDrafter)
    assert main(["--target", str(g_target), "--drafter", str(tmp_path / "g4a"),
                 "--prompt", "def add(a, b):", "--max-tokens", "12", "--num-draft", "4", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)["stats"]  # a fixed length: the default (auto) follows the clock
    assert stats["generation_tokens"] == 12 and stats["drafted"] > 0


def test_a_head_for_another_target_is_one_line(tmp_path, model_dirs, capsys):
    from specmlx.generate import main
    from specmlx.models.mtp import save_mtp

    save_mtp(tiny.mtp(tiny.qwen2_args(100, hidden=32), seed=2), tmp_path / "mtp")
    assert main(["--target", str(model_dirs["target"]), "--drafter", str(tmp_path / "mtp"),
                 "--prompt", "x", "--max-tokens", "4"]) == 2
    assert "was trained for a target with 100 logits" in capsys.readouterr().err


def save_with_mtp(target, mtp, config: dict, tokenizer, path):
    """An MLX model directory with the MTP layers in a file beside the target's, as `specmlx convert`
    writes them (mlx-lm loads `model*.safetensors` only)."""
    path.mkdir()
    mx.save_safetensors(str(path / "model.safetensors"), dict(tree_flatten(target.parameters())))
    mx.save_safetensors(str(path / "mtp.safetensors"), {f"mtp.{k}": v for k, v in tree_flatten(mtp.parameters())})
    (path / "config.json").write_text(json.dumps(config))
    tokenizer.save_pretrained(str(path))
    return path


def drafts_like(target, loaded, drafter):
    """`loaded` with `drafter` gives `target`'s own greedy output, with drafts; the generation's stats."""
    prompt = [5, 9, 2, 7, 5, 9, 2, 7, 1, 3]
    generation = Engine(loaded, drafter, eos_token_ids=[]).generate(
        prompt, GenerationConfig(max_tokens=24, policy=DraftPolicy(num_draft=3)))
    assert [e.token for e in generation.token_events()] == greedy_alone(target, prompt, 24)
    assert generation.stats.drafted > 0
    return generation.stats


def test_a_qwen3_next_directory_that_kept_its_mtp_layers_drafts_with_them(tmp_path, tokenizer, vocab, monkeypatch):
    """An MLX Qwen3-Next directory with `mtp.*` in a file beside the target's (`num_nextn_predict_layers`): `mtp`
    resolves to the target's own layers, its files are counted once by the memory check, and they draft."""
    target = tiny_hybrid.tiny_qwen3_next(vocab, seed=1)
    mtp = tiny_hybrid.tiny_native_mtp(target, seed=2, guesses=True)
    config = dataclasses.asdict(tiny_hybrid.qwen3_next_args(vocab)) | {"num_nextn_predict_layers": 1}
    path = save_with_mtp(target, mtp, config, tokenizer, tmp_path / "q3next")
    counted = []
    monkeypatch.setattr(memory, "weights_bytes", lambda p: counted.append(p) or 0)
    assert loading.resolve_drafter("mtp", str(path)) == loading.DrafterSource(str(path), "mtp")
    loaded, drafter = loading.load_pair(str(path), "mtp")
    assert isinstance(drafter, NativeMTPDrafter) and counted == [path]
    assert drafts_like(target, loaded.model, drafter).accepted > 0


def test_a_nemotron_h_directory_that_kept_its_mtp_layers_drafts_with_them(tmp_path, tokenizer, vocab):
    """Nemotron-H's MTP block (`mtp_hybrid_override_pattern`: attention, MoE) in a file beside the target's."""
    target = tiny_hybrid.tiny_nemotron_h_moe(vocab, seed=1)
    mtp = tiny_hybrid.tiny_nemotron_h_mtp(target, seed=2, guesses=True)
    path = save_with_mtp(target, mtp, tiny_hybrid.nemotron_h_moe_config(vocab), tokenizer, tmp_path / "nemotron")
    loaded, drafter = loading.load_pair(str(path), "mtp")
    assert isinstance(drafter, NativeMTPDrafter)
    want = dict(tree_flatten(mtp.parameters()))
    assert all(mx.array_equal(v, want[k]) for k, v in tree_flatten(drafter.model.parameters()))
    drafts_like(target, loaded.model, drafter)


def hugging_faces_deepseek_v3_mtp(mtp, layer: int) -> dict:
    """A DeepSeek-V3-style MTP layer as its checkpoints hold it: under `model.layers.{layer}.`, experts
    one tensor each, MLA's `kv_b_proj` fused (DeepSeek-V3), a copy of the embedding beside."""
    attention = mtp.block.self_attn
    out = {"embed_tokens.weight": mx.zeros((4, 4))}
    for k, v in tree_flatten(mtp.parameters()):
        k = k.removeprefix("block.")
        if ".switch_mlp." in k:
            base, name = k.split(".switch_mlp.")
            out.update({f"{base}.experts.{e}.{name}": v[e] for e in range(v.shape[0])})
        elif not k.startswith(("self_attn.embed_q", "self_attn.unembed_out")):
            out[k] = v
    if hasattr(attention, "embed_q"):  # MLA: (heads, rank, nope) and (heads, v dim, rank), stored as one
        fused = mx.concatenate([attention.embed_q.weight.swapaxes(-1, -2), attention.unembed_out.weight], axis=1)
        out["self_attn.kv_b_proj.weight"] = fused.reshape(-1, fused.shape[-1])
    return {f"model.layers.{layer}.{k}": v for k, v in out.items()}


NEXTN = {"deepseek_v3": (tiny_hybrid.tiny_deepseek_v3, tiny_hybrid.deepseek_v3_config),
         "glm4_moe": (tiny_hybrid.tiny_glm4_moe, tiny_hybrid.glm4_moe_config),
         "glm4_moe_lite": (tiny_hybrid.tiny_glm4_moe_lite, tiny_hybrid.glm4_moe_lite_config)}


@pytest.mark.parametrize("kind", sorted(NEXTN))
def test_a_directory_with_its_nextn_mtp_layer_as_hugging_face_holds_it_drafts_with_it(tmp_path, tokenizer, vocab,
                                                                                       kind):
    """`model.layers.{N}.*` (N: the target's layer count), renamed by mlx-lm's own rules for the target."""
    build, config = NEXTN[kind]
    target = build(vocab, seed=1)
    mtp = tiny_hybrid.tiny_deepseek_v3_mtp(target, seed=2, guesses=True)
    path = save_with_mtp(target, mtp, config(vocab), tokenizer, tmp_path / kind)
    mx.save_safetensors(str(path / "mtp.safetensors"), hugging_faces_deepseek_v3_mtp(mtp, 2))
    loaded, drafter = loading.load_pair(str(path), "mtp")
    assert isinstance(drafter, NativeMTPDrafter)
    want = dict(tree_flatten(mtp.parameters()))
    for k, v in tree_flatten(drafter.model.parameters()):
        assert mx.allclose(v, want[k], atol=1e-5), k
    drafts_like(target, loaded.model, drafter)


def test_a_mimo_directory_with_its_mtp_layer_as_hugging_face_holds_it_drafts_with_it(tmp_path, tokenizer, vocab):
    """`model.mtp_layers.0.*`, the block's tensors beside the layer's own."""
    target = tiny_hybrid.tiny_mimo(vocab, seed=1)
    mtp = tiny_hybrid.tiny_mimo_mtp(target, seed=2, guesses=True)
    path = save_with_mtp(target, mtp, tiny_hybrid.mimo_config(vocab), tokenizer, tmp_path / "mimo")
    stored = {f"model.mtp_layers.0.{k}": v for k, v in tree_flatten(mtp.parameters())}
    mx.save_safetensors(str(path / "mtp.safetensors"), stored)
    loaded, drafter = loading.load_pair(str(path), "mtp")
    want = dict(tree_flatten(mtp.parameters()))
    assert all(mx.array_equal(v, want[k]) for k, v in tree_flatten(drafter.model.parameters()))
    drafts_like(target, loaded.model, drafter)
