"""mlx.launch as the README shows it: it starts two ring ranks on this machine, and a killed
rank shows as the README says."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import ranks

LOST_WITHIN = 100  # a bound on the wait for the launcher to stop, under the watchdog's 120 s; the lines say why


def test_mlx_launch_starts_two_local_ranks_that_generate(dirs):
    port = ranks.free_ports(1)[0]  # mlx.launch listens on this port and the next
    launcher = Path(sys.executable).parent / "mlx.launch"
    done = subprocess.run(
        [str(launcher), "--backend", "ring", "-n", "2", "--starting-port", str(port), "--",
         sys.executable, "-m", "specmlx", "generate", "--distributed", "--target", str(dirs["target"]),
         "--drafter", str(dirs["drafter"]), "--prompt", "def add(a, b):", "--max-tokens", "12", "--json"],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=ranks.TIMEOUT)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)  # rank 0 alone printed: one JSON document
    assert len(out["tokens"]) == 12 and out["lockstep"]["ranks"] == 2


def children(pid: int) -> list[int]:
    """The processes `pid` started: mlx.launch's ranks (its shell wrapper execs into each)."""
    rows = subprocess.run(["ps", "-A", "-o", "pid=,ppid="], capture_output=True, text=True, check=True).stdout
    return [int(p) for p, parent in (row.split() for row in rows.splitlines()) if int(parent) == pid]


def test_a_rank_killed_under_mlx_launch_shows_as_its_warning_and_one_line(dirs, tmp_path):
    """mlx.launch exits 0 even then (upstream; the README says how to tell): its warning names
    the killed rank, and the survivor says in one line that it lost it, nothing more."""
    port = ranks.free_ports(1)[0]
    launcher = Path(sys.executable).parent / "mlx.launch"
    out, err = tmp_path / "out", tmp_path / "err"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        proc = subprocess.Popen(
            [str(launcher), "--backend", "ring", "-n", "2", "--starting-port", str(port), "--",
             sys.executable, "-m", "specmlx", "generate", "--distributed", "--target", str(dirs["target"]),
             "--drafter", str(dirs["drafter"]), "--prompt", "def", "--max-tokens", "4000"],
            stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
            env={**os.environ, "SPECMLX_DATA_DIR": str(ranks.data_dir(tmp_path))})
    try:
        deadline = time.monotonic() + ranks.TIMEOUT
        while not out.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert out.read_text(), err.read_text()[-1500:]
        os.kill(children(proc.pid)[0], signal.SIGKILL)
        proc.wait(timeout=LOST_WITHIN)
    finally:
        for pid in children(proc.pid):
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    text = re.sub(r"\x1b\[[0-9;]*m", "", err.read_text())
    lines = [line.strip() for line in text.splitlines()]
    # The launcher and the survivor write one stderr, the launcher a warning in pieces: read it as a text, not lines.
    said = re.findall(r"specmlx(?: generate)?: .*", text)
    assert len(said) == 1, lines
    survivor, lost = map(int, re.match(r"specmlx(?: generate)?: error: rank (\d) of 2: lost the other ranks "
                                       r"\((?:rank (\d) stopped|\[ring\] connection to a peer was lost)\); "
                                       r"stopping", said[0]).groups(default=-1))
    assert f"Node with rank {1 - survivor} exited with code -9" in text, lines
    assert lost in (-1, 1 - survivor)
    assert not [line for line in lines if "Traceback" in line or line.startswith("[ring]")], lines
    assert proc.returncode == 0  # upstream's launcher: the README tells users to read the lines above
