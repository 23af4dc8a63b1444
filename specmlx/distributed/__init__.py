"""A target sharded across machines with MLX's own distributed layer, drafted on rank 0.

`mlx.launch` starts the ranks and `mx.distributed` connects them (ring over
TCP, JACCL over Thunderbolt); mlx-lm's `shard()` and `pipeline()` split the
target. specmlx adds what speculation needs on top: the lockstep of rounds
(`lockstep.py`), the per-rank memory check and loading (`load.py`), the
stand-in drafter of the ranks that do not draft (`follower.py`), and a
server's slots and jobs mirrored on every rank (`serve.py`).
"""

from .follower import Follower, follow
from .group import Group, join
from .lockstep import Control, Lockstep

__all__ = ["Control", "Follower", "Group", "Lockstep", "follow", "join"]
