"""Noticing at once that another rank's process has ended, whichever collective is pending.

MLX's ring backend fails the transfers pending on a socket whose peer has died, and that
socket's thread then exits: a collective queued on it afterwards, even later in the same
graph (a round's forward holds many), waits forever. So whether a survivor noticed its peer's
death in a second or only when the watchdog's --peer-timeout ran out depended on which
collective was pending. Each rank therefore also holds one TCP connection of its own to rank
0, on which nothing is sent but a goodbye: when a rank's process ends, however it ends, its
operating system closes the connection and the other end reads EOF at once, whatever MLX is
doing. A rank that hangs while alive is still the watchdog's to notice.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
from time import monotonic
from typing import Callable, Mapping

from .output import end

HELLO = b"specmlx-liveness"  # then the rank's number: how rank 0 knows each connection
BYE = b"\x00"  # a rank that finished its part: the EOF after it is no loss


class PeerGone(Exception):
    """Another rank's process ended, or the connection to it broke, without a goodbye."""


def leader_host(environ: Mapping[str, str] = os.environ) -> str | None:
    """Rank 0's address, as mlx.launch gave it to the backend: the ring's hostfile, JACCL's
    coordinator, NCCL's host. None under MPI, whose launcher ends every rank when one dies."""
    if "MLX_HOSTFILE" in environ:
        with open(environ["MLX_HOSTFILE"]) as fh:
            address = json.load(fh)[0][0]
    elif "MLX_JACCL_COORDINATOR" in environ:
        address = environ["MLX_JACCL_COORDINATOR"]
    elif "NCCL_HOST_IP" in environ:
        return environ["NCCL_HOST_IP"]
    else:
        return None
    return address.rsplit(":", 1)[0].strip("[]")


class Liveness:
    """This rank's connections to the ranks it watches (rank 0 watches every other; the
    others watch rank 0, so a loss anywhere reaches every rank through rank 0's exit)."""

    def __init__(self, name: str, peers: dict[int, socket.socket]) -> None:
        self.name = name
        self._peers = peers
        self._on_lost: Callable[[PeerGone], None] = self._end
        self._ending = threading.Lock()  # taken once: by the first loss seen, or by `leave`
        self._handled = threading.Event()
        # One thread per peer, reading until its goodbye or EOF (joinable: a test waits for them).
        self.watchers = tuple(threading.Thread(target=self._watch, args=(rank, sock), daemon=True,
                                               name=f"specmlx-liveness-{rank}") for rank, sock in peers.items())
        for watcher in self.watchers:
            watcher.start()

    @classmethod
    def open(cls, name: str, rank: int, size: int, host: str, share: Callable[[int], int],
             timeout: float) -> "Liveness":
        """Connect the ranks: rank 0 listens on `host` and `share`s its port (every rank calls
        `share` at once: the others pass 0 and get the port); raises OSError past `timeout`."""
        if rank == 0:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            with socket.create_server((host, 0), family=family) as server:
                share(server.getsockname()[1])
                peers = _accept(server, size, monotonic() + timeout)
        else:
            sock = socket.create_connection((host, share(0)), timeout=timeout)
            sock.sendall(HELLO + struct.pack(">I", rank))
            peers = {0: sock}
        for sock in peers.values():
            sock.settimeout(None)
        return cls(name, peers)

    def when_lost(self, handler: Callable[[PeerGone], None]) -> None:
        """Call `handler` (on a thread of its own) instead of ending the process at once."""
        self._on_lost = handler

    def leave(self, clean: bool) -> None:
        """This rank is done with its peers. `clean`: it finished its part, and says goodbye so
        that they take its exit calmly. Otherwise it only stops watching: the connections close
        with the process, after its own last line, and the peers see it go then. If a loss is
        being handled meanwhile, wait for that instead: it decides how this rank ends."""
        if not self._ending.acquire(blocking=False):
            self._handled.wait()
            return
        for sock in self._peers.values() if clean else ():
            try:
                sock.sendall(BYE)
                sock.shutdown(socket.SHUT_RDWR)  # wakes this rank's watcher, which then sees the lock taken
                sock.close()
            except OSError:
                pass

    def _watch(self, rank: int, sock: socket.socket) -> None:
        try:
            said, why = sock.recv(1), f"rank {rank} stopped"
        except OSError as err:
            said, why = b"", f"the connection to rank {rank} broke: {err}"
        if said != BYE:
            self._lost(PeerGone(why))

    def _lost(self, err: PeerGone) -> None:
        if not self._ending.acquire(blocking=False):
            return  # this rank is already ending, by a loss seen first or by leaving
        try:
            self._on_lost(err)
        finally:
            self._handled.set()

    def _end(self, err: PeerGone) -> None:
        end(f"{self.name}: lost the other ranks ({err}); stopping")


def _accept(server: socket.socket, size: int, deadline: float) -> dict[int, socket.socket]:
    """Each other rank's connection, known by the number it sends; anything else is dropped."""
    peers: dict[int, socket.socket] = {}
    while len(peers) < size - 1:
        server.settimeout(max(deadline - monotonic(), 0.01))
        conn, _ = server.accept()  # TimeoutError past the deadline
        conn.settimeout(max(deadline - monotonic(), 0.01))
        try:
            hello = _read(conn, len(HELLO) + 4)
        except OSError:
            conn.close()
            continue
        (rank,) = struct.unpack(">I", hello[len(HELLO):])
        if hello[: len(HELLO)] != HELLO or not 0 < rank < size or rank in peers:
            conn.close()
            continue
        peers[rank] = conn
    return peers


def _read(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed before saying which rank it is")
        data += chunk
    return data
