"""`specmlx bench --skeleton`: real layers, heads, vocabulary and tokenizer at tiny widths; the `self` drafter."""

from __future__ import annotations

import json

import mlx.core as mx
import pytest

from specmlx.bench.cli import main
from specmlx.bench.skeleton import FFN, SELF, Skeleton, skeleton_config
from specmlx.drafters import ModelDrafter
from specmlx.loading import DrafterSource

SHAPE = dict(num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
             intermediate_size=256)
PROMPTS = [{"id": "p0", "kind": "code", "prompt": "def add(a, b):\n    return a + b\n\ndef add(a, b):"},
           {"id": "p1", "kind": "text", "prompt": "The quick brown fox"}]


def write_model_dir(path, tokenizer, vocab: int, **shape):
    """What a fetched model directory holds that a skeleton reads: config.json and the tokenizer files."""
    path.mkdir(parents=True)
    config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "rms_norm_eps": 1e-6,
              "rope_theta": 10000.0, "vocab_size": vocab, "tie_word_embeddings": False,
              "quantization": {"group_size": 64, "bits": 4}} | SHAPE | shape
    (path / "config.json").write_text(json.dumps(config))
    tokenizer.save_pretrained(str(path))
    return path


@pytest.fixture(scope="module")
def dirs(tmp_path_factory, tokenizer, vocab):
    root = tmp_path_factory.mktemp("skeleton")
    return {"target": write_model_dir(root / "target", tokenizer, vocab + 64),
            "drafter": write_model_dir(root / "drafter", tokenizer, vocab + 64, num_hidden_layers=2,
                                       num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)}


def test_the_skeleton_keeps_layers_heads_and_vocabulary_at_a_tiny_width(dirs, vocab):
    built = Skeleton(head_dim=4).load_target(str(dirs["target"]), dirs["target"], lambda _: None)
    args = built.model.args
    assert (args.num_hidden_layers, args.num_attention_heads, args.num_key_value_heads) == (3, 4, 2)
    assert args.vocab_size == vocab + 64 and not args.tie_word_embeddings
    assert (args.hidden_size, args.intermediate_size) == (16, FFN * 16)  # heads x head dim
    assert len(built.model.model.layers) == 3 and built.model.lm_head.weight.dtype == mx.float32
    head = built.model.lm_head.weight
    assert not mx.any(head[vocab:]).item() and mx.all(mx.any(head[:vocab] != 0, axis=1)).item()
    assert built.tokenizer.encode("def add") == built.tokenizer.encode("def add")  # the real tokenizer's


def test_a_drafter_skeleton_keeps_its_own_layout_and_self_is_the_target(dirs, vocab):
    skeleton = Skeleton(head_dim=4)
    target = skeleton.load_target(str(dirs["target"]), dirs["target"], lambda _: None)
    drafter = skeleton.load_drafter(DrafterSource(str(dirs["drafter"]), "drafter"), target, dirs["drafter"],
                                    lambda _: None)
    args = drafter.draft_model.args
    assert (args.num_hidden_layers, args.num_attention_heads, args.hidden_size) == (2, 2, 8)
    assert args.tie_word_embeddings and drafter.name == "drafter"
    itself = skeleton.load_drafter(DrafterSource(str(dirs["target"]), "t"), target, dirs["target"], lambda _: None)
    assert isinstance(itself, ModelDrafter) and itself.draft_model is target.model and itself.name == SELF


def test_the_config_loses_its_quantization_and_keeps_the_rest():
    config = skeleton_config({"model_type": "llama", "num_attention_heads": 6, "head_dim": 64, "hidden_size": 384,
                              "quantization": {"bits": 4}, "vocab_size": 99, "num_hidden_layers": 5}, 8)
    assert config["hidden_size"] == 48 and config["head_dim"] == 8 and "quantization" not in config
    assert (config["vocab_size"], config["num_hidden_layers"]) == (99, 5)


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def prompts_file(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    return path


def test_models_not_fetched_are_one_line_naming_the_fetch(capsys, monkeypatch, tmp_path, prompts_file):
    monkeypatch.setenv("SPECMLX_MODELS", str(tmp_path / "empty"))
    code, out, err = run(capsys, "--skeleton", "--drafter", "self,ngram", "--prompts", prompts_file)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "is not fetched yet" in err and err.endswith("run: specmlx models fetch qwen2.5-coder-1.5b\n")


@pytest.mark.parametrize("argv, message", [
    (["--skeleton", "--target", "someone/some-model"], "someone/some-model: no such model directory "
                                                        "(--skeleton never downloads: fetch it first)"),
    (["--skeleton", "3"], "--skeleton: the head dim must be even and >= 2 (rotary embeddings), got 3"),
    (["--drafter", "self"], "--drafter self: the target's own weights draft only with --skeleton"),
])
def test_skeleton_refusals_are_one_line(capsys, dirs, prompts_file, argv, message):
    argv = argv if "--target" in argv else ["--target", dirs["target"], *argv]
    code, out, err = run(capsys, *argv, "--prompts", prompts_file)
    assert code == 2 and out == "" and err == f"specmlx bench: error: {message}\n"


def test_self_agrees_with_the_target_at_t0_and_rounds_report_their_host_work(capsys, tmp_path, dirs, prompts_file):
    out_json = tmp_path / "bench.json"
    code, out, err = run(capsys, "--skeleton", "--target", dirs["target"], "--drafter", "self,self+auto,ngram",
                         "--prompts", prompts_file, "--max-tokens", 10, "--num-draft", 3, "--temps", 0,
                         "--calibration-steps", 1, "--warmup-tokens", 2, "--json", out_json)
    assert code == 0, err
    doc = json.loads(out_json.read_text())
    rows = {(r["mode"], r["drafter"], r["num_draft"]): r for r in doc["results"]}
    assert set(rows) == {("target", "", 0), ("mlx-lm-spec", SELF, 3), ("specmlx", SELF, 3),
                         ("specmlx", "self+auto", None), ("specmlx", "ngram", 3)}
    for key in [("mlx-lm-spec", SELF, 3), ("specmlx", SELF, 3)]:
        assert rows[key]["same_as_target"] == 2 and rows[key]["acceptance_rate"] == 1.0  # greedy: it agrees
    for row in rows.values():  # every round's forwards were calibrated: each row has its host work
        assert row["forward_s_per_round"] > 0 and row["host_steps"] is not None
    vocab = json.loads((dirs["target"] / "config.json").read_text())["vocab_size"]
    assert doc["config"]["skeleton"]["models"] == {"target": f"3 layers, 4 heads (2 KV), hidden 32, vocab {vocab}"}
    assert "host/round (steps)" in out and "skeletons (random weights, head dim 8" in out


def test_an_mtp_head_is_rebuilt_as_wide_as_the_skeleton_target_and_drafts(dirs, tmp_path, tokenizer):
    from specmlx.engine import Engine, GenerationConfig
    from specmlx.models.mtp import MODEL_TYPE

    head = tmp_path / "mtp"
    head.mkdir()
    (head / "config.json").write_text(json.dumps({
        "model_type": MODEL_TYPE, "target_hidden_size": 64, "target_vocab_size": 1, "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "draft_vocab_size": 32}))
    skeleton = Skeleton(head_dim=4)
    target = skeleton.load_target(str(dirs["target"]), dirs["target"], lambda _: None)
    drafter = skeleton.load_drafter(DrafterSource(str(head), "mtp"), target, head, lambda _: None)
    assert drafter.model.config.hidden_size == drafter.model.config.target_hidden_size == 16
    engine = Engine(target.model, drafter, target.tokenizer)
    generation = engine.generate(tokenizer.encode("def add(a, b):"), GenerationConfig(max_tokens=6))
    assert len(list(generation.token_events())) == 6 and generation.stats.drafted > 0


def test_a_saved_skeleton_loads_in_mlx_lm_as_the_same_model(dirs, tmp_path):
    """mlx_lm.server loads only from disk: the saved skeleton is the same model, logits and all."""
    from mlx_lm import load

    from specmlx.bench.skeleton import save_skeleton

    built = Skeleton(head_dim=4).load_target(str(dirs["target"]), dirs["target"], lambda _: None)
    saved = save_skeleton(built, 4, tmp_path / "saved")
    model, tokenizer = load(str(saved))
    tokens = mx.array([built.tokenizer.encode("def add(a, b):")])
    assert tokenizer.encode("def add(a, b):") == built.tokenizer.encode("def add(a, b):")
    assert mx.allclose(model(tokens), built.model(tokens), atol=1e-5).item()
    assert "quantization" not in json.loads((saved / "config.json").read_text())


def test_the_serve_bench_serves_skeletons_with_skeleton(dirs):
    from argparse import Namespace

    from specmlx.bench.serve.sweep import load_served

    args = Namespace(target=str(dirs["target"]), skeleton=4)
    loaded = load_served(args, [SELF, None], lambda _: None)
    assert loaded.target.model.args.hidden_size == 16
    assert loaded.drafters[0].draft_model is loaded.target.model
