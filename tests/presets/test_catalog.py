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
    assert main(["--prompt", "def add(a, b):", "--max-tokens", "8", "--num-draft", "4", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)["stats"]  # a fixed length: auto may not draft in 8 tokens
    assert stats["drafter"] == preset.drafter and stats["drafted"] > 0  # its short name, not a path


def test_a_drafter_role_names_that_presets_drafter(models_root, model_dirs):
    preset = presets.get_preset("qwen2.5-coder-1.5b")
    shutil.copytree(model_dirs["drafter"], presets.model_path(preset, preset.drafter))
    path = str(presets.model_path(preset, preset.drafter))
    assert resolve_drafter(preset.drafter, preset.name) == DrafterSource(path, preset.drafter)
    # not a preset's role without a preset target: there `mtp` is the target's own MTP layers, which
    # a directory without them does not ship
    with pytest.raises(SpecmlxError, match="ships no MTP layers"):
        resolve_drafter("mtp", "/some/dir")


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


# The presets for Macs (issue 28): Gemma 4 pairs and Qwen2.5-Coder targets above 1.5B.
GEMMA4 = ("gemma-4-e2b", "gemma-4-e4b")
QWEN_BILLIONS = {"qwen2.5-coder-0.5b": 0.5, "qwen2.5-coder-1.5b": 1.5, "qwen2.5-coder-7b": 7,
                 "qwen2.5-coder-14b": 14, "qwen2.5-coder-32b": 32}


def test_every_preset_has_a_target_hub_ids_and_a_default_drafter_it_holds():
    from specmlx.drafters.labels import BUILTIN
    from specmlx.hub import is_repo_id

    for preset in presets.presets().values():
        assert preset.target.role == "target" and preset.target.hub, preset.name
        assert preset.drafter in BUILTIN or preset.drafter in {d.role for d in preset.drafters}, preset.name
        for source in preset.sources:
            assert source.bundled or (is_repo_id(source.hub) and source.hub.startswith("mlx-community/")), source


def test_the_gemma4_presets_pair_a_4bit_target_with_its_assistant():
    for name in GEMMA4:
        preset = presets.get_preset(name)
        size = name.removeprefix("gemma-4-")  # e2b, e4b
        assert preset.drafter == "assistant" and [d.role for d in preset.drafters] == ["assistant"]
        assert preset.target.hub == f"mlx-community/gemma-4-{size}-it-4bit"
        assert preset.drafters[0].hub == f"mlx-community/gemma-4-{size.upper()}-it-assistant-bf16"


@pytest.mark.parametrize("name", ["qwen2.5-coder-7b", "qwen2.5-coder-14b", "qwen2.5-coder-32b"])
def test_the_large_qwen_presets_are_drafted_by_the_0_5b_or_by_prompt_lookup(name, models_root):
    preset = presets.get_preset(name)
    small = presets.get_preset("qwen2.5-coder-1.5b").drafters[0]
    assert preset.target.hub == f"mlx-community/Qwen2.5-Coder-{name.split('-')[-1].upper()}-Instruct-4bit"
    assert preset.drafter == small.role and preset.drafters == (small,)  # the same 0.5B, as the 1.5B's
    assert resolve_drafter("ngram", name) == DrafterSource("ngram", "ngram")


def test_memory_figures_are_present_and_plausible():
    for preset in presets.presets().values():
        assert all(s.bundled or s.size_gb > 0 for s in preset.sources), preset.name
        assert preset.memory_bytes > preset.download_bytes > 0, preset.name  # weights and a margin
    for name, billions in QWEN_BILLIONS.items():  # 4-bit MLX stores about 4.5 bits a weight
        size = presets.get_preset(name).target.size_gb
        assert 0.5 < size / billions < 0.7, name
    assert presets.get_preset("gemma-4-e2b").memory_bytes < presets.get_preset("gemma-4-e4b").memory_bytes


@pytest.fixture
def catalog(tmp_path, monkeypatch):
    """A catalog of the test's own, read afresh (and the packaged one again afterwards)."""
    path = tmp_path / "presets.toml"
    monkeypatch.setattr(presets, "catalog_path", lambda: path)
    presets._catalog.cache_clear()
    yield path
    presets._catalog.cache_clear()


@pytest.mark.parametrize("body, error", [
    ('[presets.p.models.d]\nhub = "a/b"\nsize_gb = 1', "preset p has no \\[models.target\\]"),
    ('[presets.p.models.target]\nhub = "a/b"', "p/target has no size_gb"),
    ('[presets.p]\ndrafter = "d"\n[presets.p.models.target]\nhub = "a/b"\nsize_gb = 1',
     "preset p's drafter 'd' is none of its models"),
])
def test_a_catalog_mistake_is_one_clear_error(catalog, body, error):
    catalog.write_text(body)
    with pytest.raises(SpecmlxError, match=error):
        presets.presets()
