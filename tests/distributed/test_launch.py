"""Startup as the README shows it: mlx.launch starts two ring ranks on this machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from . import ranks


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
