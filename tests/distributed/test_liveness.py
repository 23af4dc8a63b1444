"""Noticing at once that a rank's process has ended: the liveness connection on its own, and two
ranks whose survivor waits in a collective that MLX never fails."""

from __future__ import annotations

import json
import queue
import socket
import struct
import threading

import pytest

from specmlx.distributed.group import lost_link
from specmlx.distributed.liveness import HELLO, Liveness, PeerGone, leader_host

from . import ranks

SEEN_WITHIN = 5  # seconds for a loopback connection's EOF to reach its watcher (milliseconds here)
LOST_WITHIN = 100  # a bound on the wait only, under the watchdog's PEER_TIMEOUT: the line says what noticed it
PEER_TIMEOUT = 300


def sharing():
    """What the ranks' collective does at joining, through a queue: rank 0's port reaches the others."""
    ports: queue.Queue[int] = queue.Queue()

    def share(port: int) -> int:
        if port:
            ports.put(port)
            return port
        return ports.get(timeout=SEEN_WITHIN)

    return share


def leading(share) -> tuple[threading.Thread, list[Liveness]]:
    """Rank 0 of two opening its side, on a thread: it waits for rank 1 to connect."""
    lead: list[Liveness] = []
    opening = threading.Thread(target=lambda: lead.append(
        Liveness.open("rank 0 of 2", 0, 2, "127.0.0.1", share, SEEN_WITHIN)))
    opening.start()
    return opening, lead


def watched(liveness: Liveness) -> tuple[list[PeerGone], threading.Event]:
    seen: list[PeerGone] = []
    event = threading.Event()
    liveness.when_lost(lambda err: (seen.append(err), event.set()))
    return seen, event


def test_a_peer_whose_connection_closes_without_a_goodbye_is_lost_at_once():
    share = sharing()
    opening, lead = leading(share)
    peer = socket.create_connection(("127.0.0.1", share(0)), timeout=SEEN_WITHIN)  # what rank 1's process holds
    peer.sendall(HELLO + struct.pack(">I", 1))
    opening.join(SEEN_WITHIN)
    seen, event = watched(lead[0])
    peer.close()  # as the OS does when rank 1's process is killed
    assert event.wait(SEEN_WITHIN)
    assert [str(e) for e in seen] == ["rank 1 stopped"] and lost_link(seen[0])
    lead[0].leave(clean=False)  # a loss was handled: leaving returns at once


def test_a_goodbye_is_no_loss_either_way():
    share = sharing()
    opening, lead = leading(share)
    follow = Liveness.open("rank 1 of 2", 1, 2, "127.0.0.1", share, SEEN_WITHIN)
    opening.join(SEEN_WITHIN)
    (lead_seen, _), (follow_seen, _) = watched(lead[0]), watched(follow)
    follow.leave(clean=True)
    lead[0].leave(clean=True)
    for watcher in lead[0].watchers + follow.watchers:  # each has read its goodbye or EOF, and ended
        watcher.join(SEEN_WITHIN)
        assert not watcher.is_alive(), watcher.name
    assert lead_seen == [] and follow_seen == []


def test_rank_0s_address_is_read_from_what_each_launcher_sets(tmp_path):
    hosts = tmp_path / "hosts.json"
    hosts.write_text(json.dumps([["10.0.0.1:5000", "10.0.0.1:5001"], ["10.0.0.2:5000", "10.0.0.2:5001"]]))
    assert leader_host({"MLX_HOSTFILE": str(hosts)}) == "10.0.0.1"
    hosts.write_text(json.dumps([["[fe80::1]:5000"], ["[fe80::2]:5000"]]))
    assert leader_host({"MLX_HOSTFILE": str(hosts)}) == "fe80::1"
    assert leader_host({"MLX_JACCL_COORDINATOR": "192.168.2.1:32323"}) == "192.168.2.1"
    assert leader_host({"NCCL_HOST_IP": "10.1.1.1", "NCCL_PORT": "12345"}) == "10.1.1.1"
    assert leader_host({"OMPI_COMM_WORLD_SIZE": "2"}) is None  # mpirun ends every rank itself


# A round's shape: a collective, the forward's compute, another collective, in one graph. When
# the peer dies during the first, MLX's ring backend fails it, its socket's thread ends, and the
# stream goes on to the second, which waits on that socket forever.
SURVIVOR = """
import os, signal, sys, time
from argparse import Namespace
import mlx.core as mx
from specmlx.distributed.cli import joined
from specmlx.cli import run_cli

def body():
    with joined(Namespace(distributed=True, peer_timeout=float(sys.argv[2]))) as group:
        if group.rank == int(sys.argv[1]):
            time.sleep(1)  # the survivor waits in the first collective by then
            os.kill(os.getpid(), signal.SIGKILL)
        first = mx.distributed.all_sum(mx.ones(4), group=group.group, stream=mx.cpu)
        work = mx.ones((1024, 1024), stream=mx.cpu) * first[0]
        for _ in range(4):
            work = mx.matmul(work, work, stream=mx.cpu) * 1e-3
        second = mx.distributed.all_sum(work[0, :1], group=group.group, stream=mx.cpu)
        with group.waiting():
            mx.eval(second)
    return 0

sys.exit(run_cli("survivor", body))
"""


@pytest.mark.parametrize("killed", [1, 0])
def test_a_survivor_waiting_in_a_collective_mlx_never_fails_stops_at_once(tmp_path, killed):
    procs = ranks.start([str(killed), str(PEER_TIMEOUT)], tmp_path, program=("-c", SURVIVOR))
    survivor = procs[1 - killed]
    try:
        ranks.ended(procs[killed], ranks.TIMEOUT, "it started")  # it kills itself once both wait in the graph
        err = ranks.ended(survivor, LOST_WITHIN, "its peer died")
    finally:
        if survivor.poll() is None:
            survivor.kill()
            survivor.wait()
    assert survivor.returncode == 2, err[-1000:]
    assert err.splitlines() == [f"specmlx: error: rank {1 - killed} of 2: lost the other ranks (rank {killed} "
                                "stopped); stopping"], err[-1500:]
    log = (ranks.data_dir(tmp_path) / "specmlx.log").read_text()
    assert f"rank {1 - killed} of 2 (pid {survivor.pid}): the distributed backend's own messages follow" in log
