"""`specmlx serve`: its options and the lines it prints, without loading a model."""

from __future__ import annotations

import json
import socket

import pytest

from specmlx.cli import main as specmlx_main
from specmlx.serve.cli import build_parser, curl_line, is_loopback, main


def test_it_listens_on_loopback_by_default_with_sensible_limits():
    args = build_parser().parse_args([])
    assert (args.host, args.port, args.slots, args.max_queue, args.api_key) == ("127.0.0.1", 8000, 2, 32, None)
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


def test_serve_is_a_command_of_specmlx(capsys):
    specmlx_main(["--help"])
    assert "serve" in capsys.readouterr().out


def test_the_command_serves_until_ctrl_c_then_stops_cleanly(served_dirs):
    """`specmlx serve` for real, in its own process: the startup lines, a chat, then SIGINT."""
    import os
    import re
    import signal
    import subprocess
    import sys

    import httpx

    proc = subprocess.Popen(
        [sys.executable, "-m", "specmlx", "serve", "--target", str(served_dirs["target"]), "--drafter",
         str(served_dirs["drafter"]), "--port", "0", "--api-key", "k"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=os.environ | {"PYTHONUNBUFFERED": "1"})
    try:
        lines = []
        while not any(line.startswith("try: curl") for line in lines):
            line = proc.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
        assert lines[0].startswith("specmlx serve: target (") and "drafters: drafter (default), ngram, none" in lines[0]
        url = re.search(r"listening on (http://127\.0\.0\.1:\d+)/v1 \(API key required\)", lines[1]).group(1)
        reply = httpx.post(url + "/v1/chat/completions", headers={"Authorization": "Bearer k"}, timeout=60,
                           json={"model": "target", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5})
        assert reply.json()["usage"]["completion_tokens"] == 5
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert proc.stderr.read().strip().endswith("specmlx serve: stopped")
    finally:
        proc.kill()
        proc.stderr.close()
