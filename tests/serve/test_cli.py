"""`specmlx serve`: its options and the lines it prints, without loading a model."""

from __future__ import annotations

import json
import socket

import pytest

from specmlx.cli import main as specmlx_main
from specmlx.diskcache.keeper import open_store
from specmlx.errors import SpecmlxError
from specmlx.serve.cli import access, api_keys, build_parser, curl_line, is_loopback, main


def test_it_listens_on_loopback_by_default_with_sensible_limits():
    args = build_parser().parse_args([])
    assert (args.host, args.port, args.slots, args.max_queue, args.api_key, args.cors_origin) == (
        "127.0.0.1", 8000, None, 32, [], [])  # slots: from --cache-gb
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0")


def test_the_curl_line_is_a_valid_request():
    line = curl_line("http://127.0.0.1:8000", "qwen", api_key=True)
    body = json.loads(line.split(" -d '", 1)[1].rstrip("'"))
    assert body["model"] == "qwen" and body["messages"][0]["role"] == "user"
    assert "Authorization: Bearer $SPECMLX_API_KEY" in line


def test_a_port_in_use_is_one_line_before_any_model_loads(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert main(["--target", "/nonexistent", "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("specmlx serve: error:") and "in use" in err[0]


@pytest.mark.parametrize("flag", ["--slots", "--max-queue", "--max-tokens"])
def test_counts_below_one_are_refused(capsys, flag):
    assert main([flag, "0"]) == 2
    assert f"{flag} must be >= 1" in capsys.readouterr().err


def test_a_draft_policy_conflict_is_refused_as_from_every_front_end(capsys, tmp_path):
    """The same line as `specmlx generate` and `specmlx bench` give, before any model loads."""
    assert main(["--target", str(tmp_path / "not-loaded"), "--port", "0", "--num-draft", "auto+adaptive"]) == 2
    assert capsys.readouterr().err == ('specmlx serve: error: draft policy "auto+adaptive": auto and adaptive both '
                                       "set the draft length: choose one\n")


def test_the_default_draft_policy_and_sampling_come_from_the_shared_flags():
    from specmlx.options import draft_policy, sampling_params
    from specmlx.policy import DraftPolicy
    from specmlx.sampling import SamplingParams

    args = build_parser().parse_args(["--num-draft", "auto", "--lookup", "3", "--top-k", "20", "--temp", "0.5"])
    assert draft_policy(args) == DraftPolicy(num_draft=None, lookup=3)
    assert sampling_params(args) == SamplingParams(0.5, top_k=20)
    assert draft_policy(build_parser().parse_args([])) == DraftPolicy(num_draft=None)  # the automatic length
    assert draft_policy(build_parser().parse_args(["--adaptive"])) == DraftPolicy(num_draft=4, adaptive=True)
    assert draft_policy(build_parser().parse_args(["--num-draft", "3"])) == DraftPolicy(num_draft=3)


def test_a_usage_error_is_one_line_and_exit_2(capsys):
    assert main(["--port", "eighty"]) == 2
    assert capsys.readouterr().err == "specmlx serve: error: argument --port: invalid int value: 'eighty'\n"


def test_serve_is_a_command_of_specmlx(capsys):
    specmlx_main(["--help"])
    assert "serve" in capsys.readouterr().out


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_the_command_serves_until_ctrl_c_or_sigterm_then_stops_cleanly(served_dirs, stop):
    """`specmlx serve` for real, in its own process: the startup lines, a chat, then SIGINT (Ctrl+C)
    or SIGTERM (docker stop, systemd), which must shut down alike: exit 0, the worker closed."""
    import os
    import re
    import signal
    import subprocess
    import sys

    import httpx

    proc = subprocess.Popen(
        [sys.executable, "-m", "specmlx", "serve", "--target", str(served_dirs["target"]), "--drafter",
         str(served_dirs["drafter"]), "--port", "0", "--api-key", "k", "--slots", "3"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=os.environ | {"PYTHONUNBUFFERED": "1"})
    try:
        lines = []
        while not any(line.startswith("try: curl") for line in lines):
            line = proc.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
        assert lines[0].startswith("specmlx serve: target (") and "drafters: drafter (default), ngram, suffix, none" in lines[0]
        url = re.search(r"listening on (http://127\.0\.0\.1:\d+)/v1 \(API key required\); 3 kept conversations",
                        lines[1]).group(1)
        reply = httpx.post(url + "/v1/chat/completions", headers={"Authorization": "Bearer k"}, timeout=60,
                           json={"model": "target", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5})
        assert reply.json()["usage"]["completion_tokens"] == 5
        proc.send_signal(getattr(signal, stop))
        assert proc.wait(timeout=30) == 0
        assert proc.stderr.read().strip().endswith("specmlx serve: stopped")
    finally:
        proc.kill()
        proc.stderr.close()


def test_an_empty_key_in_the_environment_is_no_key_and_says_so():
    assert api_keys([], {"SPECMLX_API_KEY": ""}) == ((), "SPECMLX_API_KEY is set but empty: no API key is required")
    assert api_keys([], {"SPECMLX_API_KEY": "  "})[0] == ()
    assert api_keys([], {"SPECMLX_API_KEY": "s3cret"}) == (("s3cret",), None)
    assert api_keys([" a\n"], {}) == (("a",), None)  # as the header's key is stripped
    assert api_keys(["a", "b"], {"SPECMLX_API_KEY": "s3cret"}) == (("a", "b"), None)  # the flag wins
    assert api_keys([], {}) == ((), None)
    with pytest.raises(SpecmlxError, match="--api-key must not be empty"):
        api_keys([""], {})


def test_any_origin_without_a_key_is_refused_before_loading(capsys, tmp_path):
    """With CORS open to every origin and no key, any web page the user opens could use the server."""
    assert main(["--cors-origin", "*", "--port", "0", "--target", str(tmp_path / "not-loaded")]) == 2
    assert "--cors-origin * lets every web page" in capsys.readouterr().err
    allowed = access(build_parser().parse_args(["--cors-origin", "*"]), ("k",))
    assert allowed.cors_origins == ("*",) and allowed.loopback
    assert not access(build_parser().parse_args(["--host", "0.0.0.0"]), ()).loopback


def test_a_server_that_cannot_start_after_loading_says_one_line_and_exits_2(tmp_path, tokenizer, vocab):
    """A checkpoint that lacks a tensor fails inside the MLX thread that loads it: one line naming the
    tensor, exit 2, no traceback and no abort at exit (that thread is closed on the way out)."""
    import os
    import subprocess
    import sys

    import mlx.core as mx

    from tests import tiny_hybrid

    path = tiny_hybrid.save_qwen3_5(tiny_hybrid.tiny_qwen3_5(vocab, seed=1), vocab, tokenizer, tmp_path / "q35")
    weights = mx.load(str(path / "model.safetensors"))
    lost = next(k for k in weights if k.endswith("embed_tokens.weight"))
    mx.save_safetensors(str(path / "model.safetensors"), {k: v for k, v in weights.items() if k != lost})
    done = subprocess.run([sys.executable, "-m", "specmlx", "serve", "--target", str(path), "--drafter", "none",
                           "--port", "0"], capture_output=True, text=True, timeout=120,
                          env=os.environ | {"SPECMLX_WARM_UP": "0"})
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("specmlx serve: error:") and "Missing 1 parameters: " in lines[0]
    assert lines[0].endswith("embed_tokens.weight.")


def test_a_target_directory_with_its_own_mtp_layers_offers_them(tmp_path, tokenizer, vocab, capsys):
    """Beside the drafters asked for, in one process; not under --distributed (said in one line), nor for
    other targets."""
    from specmlx.serve.cli import own_mtp

    from .. import tiny_hybrid
    from ..test_loading import save_with_mtp

    target = tiny_hybrid.tiny_deepseek_v3(vocab, seed=1)
    path = save_with_mtp(target, tiny_hybrid.tiny_deepseek_v3_mtp(target, seed=2),
                         tiny_hybrid.deepseek_v3_config(vocab), tokenizer, tmp_path / "deepseek")
    assert own_mtp(build_parser().parse_args(["--target", str(path)])) == ["mtp"]
    assert own_mtp(build_parser().parse_args(["--target", str(path), "--distributed"])) == []
    assert "mtp is not offered with --distributed" in capsys.readouterr().err
    assert own_mtp(build_parser().parse_args(["--target", str(tmp_path)])) == []
    assert own_mtp(build_parser().parse_args([])) == []


@pytest.mark.parametrize("gb", ["nan", "inf", "-1", "0"])
def test_a_disk_cache_size_that_is_no_size_is_one_line(capsys, gb):
    assert main(["--disk-cache-gb", gb, "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--disk-cache-gb must be a number of GB above 0" in err[0] and "--no-disk-cache" in err[0]


def test_a_prompt_cache_folder_that_cannot_be_used_names_the_ways_out(tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv("SPECMLX_CACHE_DIR", str(tmp_path / "a-file"))
    with pytest.raises(SpecmlxError) as raised:
        open_store(1 << 30)
    assert "$SPECMLX_CACHE_DIR" in str(raised.value) and "--no-disk-cache" in str(raised.value)


def test_a_tower_that_cannot_be_read_is_one_line_and_the_server_serves_text(tmp_path, capsys):
    """Gemma 4's larger checkpoints attend both ways within an image: `serve` says so at start and serves
    text; an E2B-like one reads images; a text checkpoint has nothing to say."""
    from specmlx.serve.cli import vision_of

    from .. import tiny_gemma_vision

    said: list[str] = []
    both_ways = tiny_gemma_vision.save(tiny_gemma_vision.tokenizer(), tmp_path / "both", bidirectional="vision")
    assert vision_of(both_ways, said.append) is None
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("note: images are not read: ") and "serves text" in lines[0]
    causal = tiny_gemma_vision.save(tiny_gemma_vision.tokenizer(), tmp_path / "causal")
    assert vision_of(causal, said.append).image_token == tiny_gemma_vision.config(tiny_gemma_vision.tokenizer())[
        "image_token_id"]
    assert said == ["loading the vision tower"] * 2 and not capsys.readouterr().err
