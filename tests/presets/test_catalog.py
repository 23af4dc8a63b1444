"""The preset catalog, and preset names wherever a model is named."""

import json
import shutil

import pytest

from specmlx import presets
from specmlx.generate import main
from specmlx.errors import SpecmlxError
from specmlx.loading import DrafterSource, resolve_drafter

from ..test_paths import installed_elsewhere


def test_catalog_has_the_default_qwen_pair():
    default = presets.get_preset(presets.default_preset_name())
    assert default.name == "qwen2.5-coder-1.5b"
    assert default.target.offline == "qwen-1.5b" and default.target.hub.startswith("mlx-community/")
    assert [d.role for d in default.drafters] == [default.drafter, "mtp"]
    assert default.drafters[0].offline == "qwen-0.5b"


def test_the_bundled_mtp_head_ships_with_the_package_for_its_target():
    from specmlx.models.mtp import load_mtp

    mtp = next(d for d in presets.get_preset("qwen2.5-coder-1.5b").drafters if d.role == "mtp")
    head = load_mtp(presets.bundled_path(mtp))
    assert head.config.target_hidden_size == 1536 and head.config.target_vocab_size == 151936


def test_the_small_preset_is_its_target_drafted_by_its_own_bundled_head():
    from specmlx.models.mtp import load_mtp

    small = presets.get_preset("qwen2.5-coder-0.5b")
    assert small.drafter == "mtp" and small.target.offline == "qwen-0.5b"
    assert small.target.hub == "mlx-community/Qwen2.5-Coder-0.5B-Instruct-4bit"
    head = load_mtp(presets.bundled_path(small.drafters[0]))
    assert head.config.target_hidden_size == 896 and head.config.target_vocab_size == 151936
    assert head.config.target_model_type == "qwen2"


def test_every_model_has_a_source_and_every_offline_one_is_a_known_checkpoint():
    from specmlx.convert.sources import checkpoint

    for preset in presets.presets().values():
        for source in preset.sources:
            assert source.offline or source.bundled or source.hub, source.role
            if source.offline:
                checkpoint(source.offline)


def test_unknown_preset_is_refused():
    with pytest.raises(SpecmlxError, match="unknown preset 'nope'"):
        presets.get_preset("nope")


@pytest.fixture
def models_root(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECMLX_MODELS", str(tmp_path))
    return tmp_path


def test_unfetched_preset_says_how_to_fetch(capsys, models_root):
    assert main(["--target", "gemma-3-270m", "--prompt", "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "specmlx models fetch gemma-3-270m" in err


def test_preset_target_brings_its_drafter(capsys, models_root, model_dirs):
    preset = presets.get_preset("qwen2.5-coder-1.5b")
    shutil.copytree(model_dirs["target"], presets.model_path(preset))
    shutil.copytree(model_dirs["drafter"], presets.model_path(preset, preset.drafter))
    assert resolve_drafter(None, preset.name) == DrafterSource(str(presets.model_path(preset, preset.drafter)),
                                                               preset.drafter)
    assert resolve_drafter(None, "/some/dir") == DrafterSource("ngram", "ngram")
    assert resolve_drafter("gemma-3-270m", preset.name) == DrafterSource("ngram", "ngram")
    assert main(["--prompt", "def add(a, b):", "--max-tokens", "8", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)["stats"]
    assert stats["drafter"] == preset.drafter and stats["drafted"] > 0  # its short name, not a path


def test_a_drafter_role_names_that_presets_drafter(models_root, model_dirs):
    preset = presets.get_preset("qwen2.5-coder-1.5b")
    shutil.copytree(model_dirs["drafter"], presets.model_path(preset, preset.drafter))
    path = str(presets.model_path(preset, preset.drafter))
    assert resolve_drafter(preset.drafter, preset.name) == DrafterSource(path, preset.drafter)
    # not a role without a preset target: a directory of that name, if any ("qwen2.5-coder-0.5b"
    # is also a preset's name now, which stands for that preset's drafter)
    assert resolve_drafter("mtp", "/some/dir").source == "mtp"


def test_a_presets_models_live_under_the_models_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECMLX_MODELS", str(tmp_path / "mine"))
    preset = presets.get_preset(presets.default_preset_name())
    assert presets.model_path(preset, "mtp") == tmp_path / "mine" / preset.name / "mtp"


def test_offline_install_hint_fits_a_checkout_or_an_install(monkeypatch, tmp_path):
    from specmlx.presets.fetch import offline_install

    in_checkout = offline_install()
    assert in_checkout == 'pip install -e ".[offline-models]"'
    installed_elsewhere(monkeypatch, tmp_path)
    installed = offline_install()
    assert installed == 'pip install "specmlx[offline-models]"'
