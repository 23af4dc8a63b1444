"""Joining the group and losing it: one clear line, never a traceback or a hang."""

from __future__ import annotations

import time

import pytest

from specmlx.distributed.group import lost_link
from specmlx.generate import main as generate_main

from . import ranks

PEER_TIMEOUT = 300  # seconds: the watchdog's bound, far past LOST_WITHIN: only noticing the loss itself passes
LOST_WITHIN = 100  # a bound on the wait only (the loss shows in under a second): the line says what noticed it
KILLS = 3  # kills a test makes, each at another moment of a generation


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
def test_a_rank_killed_mid_generation_stops_the_other_at_once_with_one_line(dirs, tmp_path, killed):
    """Rank 0 streams text as it generates; once it has, one rank is killed, at a different
    moment each time (which collective the survivor waits in decides whether MLX fails it or
    leaves it waiting). The survivor must exit with one line long before the watchdog's limit,
    and the backend's own lines must not reach its stderr."""
    argv = ["generate", "--target", str(dirs["target"]), "--drafter", str(dirs["drafter"]), "--prompt", "def",
            "--max-tokens", "4000", "--distributed", "--peer-timeout", str(PEER_TIMEOUT)]
    for kill in range(KILLS):
        folder = tmp_path / str(kill)
        folder.mkdir()
        procs = ranks.start(argv, folder)
        try:
            deadline = time.monotonic() + ranks.TIMEOUT
            while not procs[0].out.read_text() and time.monotonic() < deadline:
                assert all(p.poll() is None for p in procs), [p.err.read_text()[-500:] for p in procs]
                time.sleep(0.05)
            assert procs[0].out.read_text(), "rank 0 never started generating"
            time.sleep(0.3 * kill)
            procs[killed].kill()
            survivor = procs[1 - killed]
            err = ranks.ended(survivor, LOST_WITHIN, f"its peer was killed (kill {kill})")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
        name = f"rank {1 - killed} of 2"
        assert survivor.returncode == 2, err[-1000:]
        # The collective that was pending fails (one line from the command), or the liveness
        # connection shows the peer gone first (one line from it).
        assert err.splitlines() in (
            [f"specmlx generate: error: {name}: lost the other ranks ([ring] connection to a peer was lost); stopping"],
            [f"specmlx: error: {name}: lost the other ranks (rank {killed} stopped); stopping"]), err[-1500:]
