"""Runs first under pytest: give MLX a fast BLAS before anything imports it
(the slow real-model tests run ~4x faster; see specmlx/blas.py)."""

from specmlx.blas import ensure_fast_blas


def pytest_configure(config):
    # Re-executing needs the real stdout/stderr back from pytest's capture.
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.stop_global_capturing()
    ensure_fast_blas()
    if capture is not None:
        capture.start_global_capturing()
