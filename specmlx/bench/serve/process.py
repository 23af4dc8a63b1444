"""`specmlx serve` as a process of its own, on 127.0.0.1 at a free port, with its own prompt-cache
directory: started, stopped (SIGKILL, or SIGTERM as `docker stop` sends) and started again.

Its output goes to a log file, read for the line that names its address, and for its last line when
it fails (a drafter it does not know is refused that way, before it listens).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from ...errors import SpecmlxError

CACHE_DIR_ENV = "SPECMLX_CACHE_DIR"  # where the server keeps prompts on disk (`paths.disk_cache_dir`)
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)/v1")
READY_S = 900  # loading a target and a drafter, and warming them up, on a busy CPU
STOP_S = 60  # a SIGTERM'd server ends open requests and closes its worker within this
HELP_S = 120


class Refused(SpecmlxError):
    """The server exited before it listened: a flag or drafter it does not take, a model it cannot load."""


def serve_help() -> str:
    """`specmlx serve --help`: which flags this server takes (an older one has no disk cache)."""
    try:
        done = subprocess.run([sys.executable, "-m", "specmlx", "serve", "--help"], capture_output=True, text=True,
                              timeout=HELP_S)
    except subprocess.TimeoutExpired:
        raise SpecmlxError(f"specmlx serve --help did not answer within {HELP_S} s") from None
    if done.returncode != 0:
        raise SpecmlxError(f"specmlx serve --help failed: {last_line(done.stderr)}")
    return done.stdout


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


class ServeProcess:
    """`specmlx serve ARGS --host 127.0.0.1 --port 0` with $SPECMLX_CACHE_DIR at `cache_dir`:
    `start()` gives its URL once it listens; `stop()` ends it."""

    def __init__(self, args: list[str], cache_dir: Path, log: Path) -> None:
        self.argv = [sys.executable, "-m", "specmlx", "serve", *args, "--host", "127.0.0.1", "--port", "0"]
        self.env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", **{CACHE_DIR_ENV: str(cache_dir)})
        self.log = log
        self.proc: subprocess.Popen | None = None

    def start(self) -> str:
        with self.log.open("w") as out:  # the child holds its own copy of the descriptor
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            found = LISTENING.search(self.log.read_text())
            if found:
                return found.group(1)
            if self.proc.poll() is not None:
                raise Refused(last_line(self.log.read_text()))
            time.sleep(0.25)
        self.stop("kill")
        raise SpecmlxError(f"specmlx serve did not listen within {READY_S} s (its output: {self.log})")

    def stop(self, how: str) -> None:
        """`kill`: SIGKILL, as a crash or a closed laptop lid would; `term`: SIGTERM, then wait for it."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGKILL if how == "kill" else signal.SIGTERM)
        try:
            self.proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
