"""From command-line choices to models, and to clear instructions when a model is missing."""

import pytest

from app.loader import ModelChoice, failure, load_session, preset_drafters
from app.settings import ChatSettings
from specmlx.errors import SpecmlxError
from specmlx.policy import DraftPolicy


def test_a_target_without_drafter_uses_prompt_lookup(model_dirs):
    session = load_session(ModelChoice(target=str(model_dirs["target"])))
    assert session.default_drafter == "ngram" and session.target_name == "target"


def test_loading_real_directories_gives_a_session_under_short_names(model_dirs):
    steps = []
    session = load_session(ModelChoice(str(model_dirs["target"]), str(model_dirs["drafter"])), steps.append)
    assert session.default_drafter == "drafter" and session.drafters.names == ("drafter", "ngram", "none")
    assert session.target_name == "target"  # the folder's name, not its path
    assert steps[-1] == "ready" and any(s.startswith("loading drafter drafter") for s in steps)


def test_a_missing_directory_says_how_to_get_a_model(tmp_path):
    choice = ModelChoice(target=str(tmp_path / "nope"))
    with pytest.raises(SpecmlxError) as err:
        load_session(choice)
    problem = failure(err.value, choice)
    assert "no such model directory" in problem.message
    assert any(c.startswith("specmlx convert") for c in problem.commands)
    assert any("--target DIR" in c for c in problem.commands)


def test_an_unfetched_preset_names_the_fetch_command(tmp_path, monkeypatch):
    from specmlx import presets

    monkeypatch.setenv("SPECMLX_MODELS", str(tmp_path))
    name = presets.default_preset_name()
    choice = ModelChoice()
    with pytest.raises(SpecmlxError) as err:
        load_session(choice)
    problem = failure(err.value, choice)
    assert f"specmlx models fetch {name}" in problem.message
    assert problem.commands[0] == f"specmlx models fetch {name}"


def test_unexpected_errors_are_one_sentence_with_the_details_logged(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECMLX_DATA_DIR", str(tmp_path))
    problem = failure(RuntimeError("boom"), ModelChoice(target="x"))
    assert problem.message.startswith("loading the models failed: an internal error (RuntimeError; details in ")
    assert "boom" not in problem.message and "boom" in (tmp_path / "specmlx.log").read_text()


def test_the_default_preset_offers_each_of_its_drafters_without_loading_them():
    from specmlx import presets

    preset = presets.get_preset(presets.default_preset_name())
    offered = preset_drafters(preset.name, target=None)  # nothing is loaded, so no target is needed
    assert list(offered) == [d.role for d in preset.drafters] and {"mtp", preset.drafter} <= set(offered)
    assert preset_drafters("/some/model/dir", target=None) == {}


def test_the_presets_other_drafter_loads_when_first_chosen_and_drafts(tmp_path, monkeypatch, target, target_args,
                                                                      tokenizer, noisy_drafter):
    """The default preset laid out with tiny models: its default drafter loads
    with the target, its MTP head only when an answer first asks for it."""
    from specmlx import presets
    from specmlx.drafters.mtp import MTPDrafter
    from specmlx.models.mtp import save_mtp

    from .. import tiny
    from .test_session import answer

    monkeypatch.setenv("SPECMLX_MODELS", str(tmp_path))
    preset = presets.get_preset(presets.default_preset_name())
    root = tmp_path / preset.name
    tiny.save_model(target, target_args, tokenizer, root / "target")
    tiny.save_model(noisy_drafter, target_args, tokenizer, root / preset.drafter)
    save_mtp(tiny.mtp(target_args, seed=2), root / "mtp")
    session = load_session(ModelChoice())
    assert session.default_drafter == preset.drafter and "mtp" in session.drafters.names
    assert not session.drafters.is_loaded("mtp")
    started, *_, finished = answer(session, "def add(a, b):", ChatSettings(max_tokens=12, drafter="mtp",
                                                                     policy=DraftPolicy(num_draft=4)))
    assert isinstance(session.engine.drafter, MTPDrafter) and started.drafter == finished.stats.drafter == "mtp"
    assert finished.stats.drafted > 0


def test_a_target_directory_with_its_own_mtp_layers_offers_them(tmp_path, tokenizer, vocab):
    """`mtp` is offered beside the drafter loaded with it, and loads when first chosen."""
    from specmlx.drafters.native_mtp import NativeMTPDrafter
    from specmlx.loading import load_pair

    from .. import tiny_hybrid

    target = tiny_hybrid.tiny_qwen3_5(vocab, seed=1)
    mtp = tiny_hybrid.tiny_native_mtp(target, seed=2)
    path = tiny_hybrid.save_qwen3_5(target, vocab, tokenizer, tmp_path / "q35", mtp=mtp)
    loaded, _ = load_pair(str(path), "ngram")
    offered = preset_drafters(str(path), loaded)
    assert list(offered) == ["mtp"]
    assert isinstance(offered["mtp"](), NativeMTPDrafter)


def test_kv_bits_reach_the_sessions_engine(tmp_path):
    """`specmlx-chat --kv-bits 8`: the session's target keeps its keys and values at 8 bits."""
    from app.__main__ import build_parser
    from specmlx.caches.kinds import KVBits
    from specmlx.options import kv_bits

    from .. import tiny

    tok = tiny.train_tokenizer()
    args = tiny.qwen2_args(len(tok), hidden=128)
    path = tiny.save_model(tiny.build(args, seed=0), args, tok, tmp_path / "wide")
    asked = kv_bits(build_parser().parse_args(["--kv-bits", "8", "--kv-group-size", "32"]))
    assert asked == KVBits(8, 32)
    session = load_session(ModelChoice(str(path), disk_cache=False, kv=asked))
    assert set(session.engine.cache.labels) == {"kv8g32"}


def test_the_chat_takes_the_commands_kv_flags_before_mlx_is_imported():
    """`specmlx-chat` parses its arguments before MLX is imported (it may re-execute itself to load a fast
    BLAS first), with the same `--kv-bits` and `--kv-group-size` as `generate`, `serve` and `bench`."""
    import subprocess
    import sys

    probe = ("import sys, app.__main__ as m; a = m.build_parser().parse_args(['--kv-bits', '4']); "
             "print(a.kv_bits, a.kv_group_size, sorted(k for k in sys.modules if k.split('.')[0] == 'mlx'))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["4", "64", "[]"], out.stderr[-800:]
