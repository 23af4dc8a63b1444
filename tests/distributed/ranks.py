"""Local ranks for the tests: what `mlx.launch --backend ring` does on one machine,
with free loopback ports, a time limit, and every rank's output kept apart."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

TIMEOUT = 120  # seconds a test's ranks may run before they are killed


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> dict:
        return json.loads(self.stdout)


def free_ports(n: int) -> list[int]:
    """Ports the OS just handed out on 127.0.0.1 (closed again for the ranks to bind)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def hostfile(folder: Path, ranks: int) -> Path:
    """The ring backend's hostfile: one loopback address per rank."""
    path = folder / f"hosts-{os.getpid()}-{ranks}.json"
    path.write_text(json.dumps([[f"127.0.0.1:{p}"] for p in free_ports(ranks)]))
    return path


def data_dir(folder: Path) -> Path:
    """Where the ranks started in `folder` keep their log file (the backend's own lines go there)."""
    return folder / "data"


def start(argv: list[str], folder: Path, ranks: int = 2, env: dict | None = None,
          argvs: dict[int, list[str]] | None = None, program: tuple[str, ...] = ("-m", "specmlx")
          ) -> list[subprocess.Popen]:
    """`python -m specmlx ARGV` (or `argvs[rank]`; or `python PROGRAM ARGV`) as `ranks` ring ranks
    over loopback; each rank's output goes to files (`.out`, `.err` on the process), so no pipe can
    fill and stall it, and its log file to `data_dir(folder)`."""
    hosts = hostfile(folder, ranks)
    procs = []
    for rank in range(ranks):
        args = (argvs or {}).get(rank, argv)
        out, err = (folder / f"rank{rank}-{hosts.stem}.{kind}" for kind in ("out", "err"))
        with open(out, "w") as stdout, open(err, "w") as stderr:
            proc = subprocess.Popen([sys.executable, *program, *args], stdout=stdout, stderr=stderr, text=True,
                                    env={**os.environ, "SPECMLX_DATA_DIR": str(data_dir(folder)), **(env or {}),
                                         "MLX_RANK": str(rank), "MLX_HOSTFILE": str(hosts)})
        proc.out, proc.err = out, err
        procs.append(proc)
    return procs


def finish(procs: list[subprocess.Popen], timeout: float = TIMEOUT) -> list[Finished]:
    """Wait for every rank; past `timeout` (for all of them together), kill them all and fail."""
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
            p.wait()
        tails = [p.err.read_text()[-600:] for p in procs]
        raise AssertionError(f"ranks still running after {timeout} s; their stderr: {tails}") from None
    return [Finished(p.returncode, p.out.read_text(), p.err.read_text()) for p in procs]


def ended(proc: subprocess.Popen, within: float, since: str) -> str:
    """A rank's stderr once it has exited, as it must within `within` seconds `since` something
    happened; else it is killed and the test fails with its stderr."""
    try:
        proc.wait(timeout=within)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"a rank still running {within} s after {since}; its stderr: "
                             f"{proc.err.read_text()[-1500:]}") from None
    return proc.err.read_text()


def run(argv: list[str], folder: Path, ranks: int = 2, **kw) -> list[Finished]:
    return finish(start(argv, folder, ranks), **kw)
