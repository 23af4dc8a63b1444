"""What the benchmark ran on: it goes into every report, since numbers from an
unnamed machine (or an unnamed BLAS) cannot be compared."""

from __future__ import annotations

import os
import platform
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version

import mlx.core as mx

from .. import __version__
from ..blas import describe


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def cpu_model() -> str:
    """The CPU's marketing name where the OS tells it, else the architecture."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe_machine() -> dict:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "load_average": list(load) if load else None,  # a busy machine explains slow numbers
        "python": platform.python_version(),
        "mlx": _version("mlx"),
        "mlx_lm": _version("mlx-lm"),
        "specmlx": __version__,
        "backend": str(mx.default_device()),
        "blas": describe(),
    }
