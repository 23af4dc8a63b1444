"""Joining the group and losing it: one clear line, never a traceback or a hang."""

from __future__ import annotations

import subprocess
import time

import pytest

from specmlx.distributed.group import lost_link
from specmlx.generate import main as generate_main

from . import ranks

PEER_TIMEOUT = 5  # seconds: the watchdog's bound on a wait for the other ranks, short for the test
LOST_WITHIN = 30  # seconds a rank may take to notice its peer is gone


def test_distributed_without_a_launcher_is_one_line(capsys, monkeypatch, dirs):
    for name in ("MLX_HOSTFILE", "MLX_RANK", "MLX_IBV_DEVICES", "MLX_JACCL_COORDINATOR", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    code = generate_main(["--target", str(dirs["target"]), "--prompt", "x", "--distributed"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "needs ranks started by mlx.launch" in err and "mlx.launch --backend ring" in err


def test_lost_link_knows_the_backends_words():
    assert lost_link(RuntimeError("[ring] connection to a peer was lost"))
    assert not lost_link(RuntimeError("[metal] out of memory"))
    assert not lost_link(ValueError("[ring] not a runtime error"))


@pytest.mark.parametrize("killed", [1, 0])
def test_a_rank_killed_mid_generation_stops_the_other_with_one_line(dirs, tmp_path, killed):
    """Rank 0 streams text as it generates; once it has, one rank is killed, and
    the survivor must exit with a clear line well before its 4,000 tokens are done."""
    argv = ["generate", "--target", str(dirs["target"]), "--drafter", str(dirs["drafter"]), "--prompt", "def",
            "--max-tokens", "4000", "--distributed", "--peer-timeout", str(PEER_TIMEOUT)]
    procs = ranks.start(argv, tmp_path)
    deadline = time.monotonic() + ranks.TIMEOUT
    while not procs[0].out.read_text() and time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs), [p.err.read_text()[-500:] for p in procs]
        time.sleep(0.05)
    assert procs[0].out.read_text(), "rank 0 never started generating"
    procs[killed].kill()
    killed_at = time.monotonic()
    survivor = procs[1 - killed]
    try:
        survivor.wait(timeout=LOST_WITHIN)
    except subprocess.TimeoutExpired:
        survivor.kill()
        survivor.wait()
        raise AssertionError(f"rank {1 - killed} still running {LOST_WITHIN} s after its peer was killed; "
                             f"its stderr: {survivor.err.read_text()[-1500:]}") from None
    took = time.monotonic() - killed_at
    procs[killed].wait()
    err = survivor.err.read_text()
    lines = [line for line in err.splitlines() if line.startswith("specmlx")]
    name = f"rank {1 - killed} of 2"
    assert survivor.returncode == 2, err[-1000:]
    # MLX's ring backend raises in the collective that was pending (one line from the command), or a
    # collective queued after that waits until the watchdog ends it (one line from the watchdog).
    assert lines in ([f"specmlx generate: error: {name}: lost the other ranks ([ring] connection to a peer was "
                      "lost); stopping"],
                     [f"specmlx: error: {name}: no word from the other ranks for {PEER_TIMEOUT} s; a rank has "
                      "stopped or hangs; stopping"]), err[-1000:]
    assert "Traceback" not in err
    assert took < LOST_WITHIN
