"""The command line: exit 0 and the output path, or exit 2 and exactly one line on stderr."""

import subprocess
import sys

import pytest

from specmlx.convert.cli import main


def run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_converts(tiny_gguf, tmp_path, capsys):
    out = tmp_path / "model"
    code, stdout, _ = run([str(tiny_gguf("qwen2")), "--out", str(out), "--no-progress"], capsys)
    assert code == 0 and stdout.strip() == str(out) and (out / "config.json").exists()


def corrupt(path):
    data = bytearray(path.read_bytes())
    data[:4] = b"XXXX"
    path.write_bytes(bytes(data))
    return path


def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


@pytest.mark.parametrize(
    "make_source, extra, message",
    [
        (lambda g, t: g("qwen2", arch_name="phi3"), [], "unsupported architecture 'phi3'"),
        (lambda g, t: truncate(g("qwen2")), [], "truncated"),
        (lambda g, t: corrupt(g("qwen2")), [], "not a GGUF file"),
        (lambda g, t: g("qwen2"), ["--sha256", "ab" * 32], "does not match the given --sha256"),
        (lambda g, t: t / "missing.gguf", [], "no such file"),
        (lambda g, t: g("qwen2"), ["--q-bits", "7"], "unsupported --q-bits 7"),
    ],
)
def test_errors_are_one_line_and_exit_2(tiny_gguf, tmp_path, capsys, make_source, extra, message):
    source = make_source(tiny_gguf, tmp_path)
    code, _, stderr = run([str(source), "--out", str(tmp_path / "out"), "--no-progress", *extra], capsys)
    assert code == 2
    assert stderr.count("\n") == 1 and stderr.startswith("specmlx convert: error: ") and message in stderr
    assert not (tmp_path / "out").exists()


def test_refuses_overwrite_then_force(tiny_gguf, tmp_path, capsys):
    out = tmp_path / "model"
    out.mkdir()
    code, _, stderr = run([str(tiny_gguf("qwen2")), "--out", str(out), "--no-progress"], capsys)
    assert code == 2 and "already exists" in stderr and "--force" in stderr
    code, _, _ = run([str(tiny_gguf("qwen2")), "--out", str(out), "--force", "--no-progress"], capsys)
    assert code == 0 and (out / "config.json").exists()


def test_python_dash_m_has_no_traceback(tiny_gguf, tmp_path):
    source = truncate(tiny_gguf("qwen2"))
    result = subprocess.run(
        [sys.executable, "-m", "specmlx.convert", str(source), "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr
    assert result.stderr.startswith("specmlx convert: error: ") and "truncated" in result.stderr
