"""A fast BLAS for MLX's CPU backend on Linux.

The `mlx-cpu` wheel links netlib's reference BLAS (about 6 GFLOP/s for an
fp32 GEMM here); Debian's OpenBLAS, preloaded, is some 30x faster and makes
verifying k tokens cost about what one does. A library can only be preloaded
at process start, so entry points re-execute themselves once with LD_PRELOAD
set. Nothing happens on macOS (Metal) or when no OpenBLAS is installed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libblas.so.3",
)
GUARD = "SPECMLX_BLAS_CHECKED"


def openblas() -> str | None:
    return next((c for c in CANDIDATES if Path(c).exists()), None)


def ensure_fast_blas() -> None:
    """Re-execute this process with OpenBLAS preloaded, if that helps and is possible.

    Call before `mlx` is imported. Set SPECMLX_BLAS_CHECKED=1 to opt out.
    """
    if not sys.platform.startswith("linux") or os.environ.get(GUARD):
        return
    lib = openblas()
    preload = os.environ.get("LD_PRELOAD", "")
    if lib is None or lib in preload.split(":"):
        return
    env = dict(os.environ, LD_PRELOAD=":".join(p for p in (lib, preload) if p), **{GUARD: "1"})
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def describe() -> str:
    """Which BLAS this process runs MLX on, for logs and benchmark reports."""
    import mlx.core as mx  # here, not at the top: `ensure_fast_blas` runs before mlx is imported

    if not sys.platform.startswith("linux"):
        return "Accelerate/Metal (macOS)"
    if mx.default_device().type == mx.gpu:  # a BLAS is the CPU backend's: no hint to install one
        return "none (MLX runs on the GPU)"
    lib = openblas()
    if lib and lib in os.environ.get("LD_PRELOAD", "").split(":"):
        return f"OpenBLAS ({lib})"
    return "reference BLAS of the mlx-cpu wheel (slow; install libopenblas0-pthread)"
