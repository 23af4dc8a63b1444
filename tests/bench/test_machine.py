"""What a report says about the machine it ran on."""

from __future__ import annotations

import mlx.core as mx

from specmlx.bench.machine import describe_machine
from specmlx.blas import describe


def test_backend_blas_and_versions():
    machine = describe_machine()
    assert machine["backend"] == str(mx.default_device())
    assert machine["blas"] == describe()
    assert machine["mlx"] and machine["mlx_lm"] and machine["specmlx"]
    assert machine["cpu"] and machine["cpu_count"] >= 1 and machine["date"]
