"""The `specmlx COMMAND ...` dispatcher (specmlx/cli.py): help, errors, dispatch; run_cli's one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specmlx import presets
from specmlx.cli import COMMANDS, main, run_cli
from specmlx.errors import SpecmlxError

ROOT = Path(__file__).resolve().parents[1]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_lists_every_command_and_exits_0(capsys, flag):
    code, out, err = run(capsys, flag)
    assert code == 0 and err == ""
    assert out.startswith("usage: specmlx COMMAND")
    for name, (_, text) in COMMANDS.items():
        assert f"  {name}  " in out and text in out, name
    assert "specmlx-chat" in out


def test_the_commands_are_the_six_documented_ones():
    assert list(COMMANDS) == ["generate", "models", "convert", "bench", "train", "serve"]


def test_no_arguments_prints_usage_and_exits_2(capsys):
    code, out, err = run(capsys)
    assert code == 2 and out == ""  # a usage error: on stderr
    assert err.startswith("usage: specmlx COMMAND") and all(name in err for name in COMMANDS)


def test_an_unknown_command_is_one_line_on_stderr_and_exit_2(capsys):
    code, out, err = run(capsys, "frobnicate", "--help")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("specmlx: error: unknown command 'frobnicate'")
    assert all(name in err for name in COMMANDS)  # it says what the choices are
    assert "Traceback" not in err


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_has_its_own_help_under_its_specmlx_name(capsys, name):
    with pytest.raises(SystemExit) as exit_:
        main([name, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: specmlx {name}")


@pytest.fixture
def models_root(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECMLX_MODELS", str(tmp_path))
    return tmp_path


def test_models_list_dispatches_to_the_presets_cli(capsys, models_root):
    default = presets.default_preset_name()
    fetched = presets.model_path(presets.get_preset(default))
    fetched.mkdir(parents=True)
    (fetched / "config.json").write_text("{}")
    code, out, err = run(capsys, "models", "list")
    assert code == 0, err
    for name in presets.presets():
        assert f"\n{name}" in "\n" + out, name
    assert f"{default} (default):" in out
    assert f"target: fetched at {models_root / default / 'target'}" in out
    assert "not fetched" in out  # the others


def test_models_arguments_reach_the_presets_cli(capsys, models_root):
    code, out, err = run(capsys, "models", "path", "nope")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("specmlx models: error: unknown preset 'nope'")
    code, out, err = run(capsys, "models", "path", presets.default_preset_name())
    assert code == 2 and "specmlx models fetch" in err  # not fetched in this models directory


def subprocess_env() -> dict[str, str]:
    # This checkout's package first, whatever the environment has installed.
    return dict(os.environ, PYTHONPATH=str(ROOT))


def test_python_dash_m_specmlx_is_the_same_dispatcher(tmp_path):
    result = subprocess.run([sys.executable, "-m", "specmlx", "--help"], cwd=tmp_path, env=subprocess_env(),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: specmlx COMMAND")
    assert all(name in result.stdout for name in COMMANDS)
    result = subprocess.run([sys.executable, "-m", "specmlx", "nope"], cwd=tmp_path, env=subprocess_env(),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.count("\n") == 1


def test_help_loads_no_model_library(tmp_path):
    """`specmlx --help` answers at once: MLX and the command modules wait for a command."""
    code = ("import sys; from specmlx.cli import main; main(['--help']); "
            "print(sorted(m for m in ('mlx', 'mlx_lm', 'transformers', 'specmlx.generate') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=subprocess_env(),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[]"


def raising(err: BaseException):
    def body() -> int:
        raise err
    return body


@pytest.mark.parametrize("err, code, line", [
    (SpecmlxError("no such prompt file"), 2, "specmlx generate: error: no such prompt file\n"),
    (PermissionError(13, "Permission denied", "/x"), 2, "specmlx generate: error: [Errno 13] Permission denied: '/x'\n"),
    (KeyboardInterrupt(), 130, "\nspecmlx generate: interrupted\n"),
])
def test_a_command_error_is_one_line_with_its_exit_code(capsys, err, code, line):
    assert run_cli("specmlx generate", raising(err)) == code
    assert capsys.readouterr().err == line


def test_a_command_line_bug_is_one_line_and_exit_1(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECMLX_DATA_DIR", str(tmp_path / "data"))
    assert run_cli("specmlx generate", raising(KeyError("internal_detail_xyz"))) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("specmlx generate: error: generate failed: an internal error")
    assert "Traceback" not in err and "internal_detail_xyz" not in err
    assert "Traceback" in (tmp_path / "data" / "specmlx.log").read_text()
