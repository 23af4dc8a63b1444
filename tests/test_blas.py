"""Which BLAS a log or report names: the CPU backend's, and none when MLX runs on the GPU."""

from __future__ import annotations

import mlx.core as mx
import pytest

from specmlx import blas
from specmlx.bench.machine import describe_machine

LIB = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"


@pytest.fixture()
def linux_with_openblas(monkeypatch):
    monkeypatch.setattr(blas.sys, "platform", "linux")
    monkeypatch.setattr(blas, "openblas", lambda: LIB)


def test_on_the_cpu_the_preloaded_openblas_is_named(linux_with_openblas, monkeypatch):
    monkeypatch.setattr(mx, "default_device", lambda: mx.Device(mx.cpu))
    monkeypatch.setenv("LD_PRELOAD", LIB)
    assert blas.describe() == f"OpenBLAS ({LIB})"
    monkeypatch.setenv("LD_PRELOAD", "")
    assert blas.describe().endswith("(slow; install libopenblas0-pthread)")


def test_on_a_gpu_no_blas_is_named_nor_asked_for(linux_with_openblas, monkeypatch):
    monkeypatch.setattr(mx, "default_device", lambda: mx.Device(mx.gpu))
    monkeypatch.setenv("LD_PRELOAD", "")
    assert blas.describe() == "none (MLX runs on the GPU)"
    assert describe_machine()["blas"] == "none (MLX runs on the GPU)"  # what `specmlx bench` prints
