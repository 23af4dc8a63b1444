"""Where specmlx keeps things: the data directory and its log, fetched models, the checkout."""

import sys
from pathlib import Path

import pytest

from specmlx import paths

CHECKOUT = Path(__file__).resolve().parents[1]


def test_the_data_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECMLX_DATA_DIR", str(tmp_path / "x"))
    assert paths.data_dir() == tmp_path / "x"
    assert paths.log_path() == tmp_path / "x" / "specmlx.log"
    monkeypatch.delenv("SPECMLX_DATA_DIR")
    if sys.platform.startswith("linux"):
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
        assert paths.data_dir() == tmp_path / "xdg" / "specmlx"


# Where fetched models live: $SPECMLX_MODELS, a checkout's models/, or the user cache.

@pytest.fixture
def no_models_env(monkeypatch, tmp_path):
    """No $SPECMLX_MODELS, and a home and cache of this test's own."""
    monkeypatch.delenv("SPECMLX_MODELS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def installed_elsewhere(monkeypatch, tmp_path) -> Path:
    """Make the package look as if it were installed in a site-packages, not a checkout."""
    package = tmp_path / "venv" / "lib" / "site-packages" / "specmlx"
    package.mkdir(parents=True)
    monkeypatch.setattr(paths, "PACKAGE_ROOT", package)
    return package


def test_models_dir_honours_specmlx_models(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECMLX_MODELS", str(tmp_path / "mine"))
    assert paths.models_dir() == tmp_path / "mine"


def test_models_dir_expands_a_tilde_in_specmlx_models(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SPECMLX_MODELS", "~/specmlx-models")
    assert paths.models_dir() == tmp_path / "specmlx-models"


def test_an_empty_specmlx_models_counts_as_unset(monkeypatch, no_models_env):
    monkeypatch.setenv("SPECMLX_MODELS", "")
    assert paths.models_dir() == CHECKOUT / "models"


def test_in_a_checkout_models_go_to_its_models_dir(no_models_env):
    assert paths.checkout_root() == CHECKOUT
    assert paths.models_dir() == CHECKOUT / "models"


def test_checkout_root_needs_both_pyproject_and_git(monkeypatch, tmp_path):
    package = installed_elsewhere(monkeypatch, tmp_path)
    root = package.parent  # .../lib/site-packages
    assert paths.checkout_root() is None
    (root / "pyproject.toml").write_text("")
    assert paths.checkout_root() is None  # an sdist unpacked, say: not a checkout
    (root / ".git").write_text("gitdir: elsewhere\n")  # a worktree's .git is a file
    assert paths.checkout_root() == root
    (root / "pyproject.toml").unlink()
    assert paths.checkout_root() is None


def test_installed_models_go_to_the_user_cache(monkeypatch, no_models_env):
    installed_elsewhere(monkeypatch, no_models_env)
    if sys.platform == "darwin":
        expected = no_models_env / "home" / "Library" / "Caches" / "specmlx"
    else:
        expected = no_models_env / "cache" / "specmlx"  # $XDG_CACHE_HOME/specmlx
    assert paths.models_dir() == expected


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="XDG is the Linux convention")
def test_installed_models_go_to_dot_cache_without_xdg_cache_home(monkeypatch, no_models_env):
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setattr(paths, "checkout_root", lambda: None)
    assert paths.models_dir() == no_models_env / "home" / ".cache" / "specmlx"


def test_specmlx_models_wins_over_checkout_and_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECMLX_MODELS", str(tmp_path / "mine"))
    assert paths.models_dir() == tmp_path / "mine"  # in this checkout
    installed_elsewhere(monkeypatch, tmp_path)
    assert paths.models_dir() == tmp_path / "mine"  # installed


def test_the_disk_cache_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECMLX_CACHE_DIR", str(tmp_path / "kept"))
    assert paths.disk_cache_dir() == tmp_path / "kept"
    monkeypatch.delenv("SPECMLX_CACHE_DIR")
    if sys.platform.startswith("linux"):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert paths.disk_cache_dir() == tmp_path / "xdg" / "specmlx" / "prompt-cache"
