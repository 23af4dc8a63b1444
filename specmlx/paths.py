"""Where specmlx keeps things on this machine: the data directory (history,
log), fetched models, the prompt cache on disk, and the source checkout it may run from.

A leaf: it imports nothing of specmlx, so any module may ask it.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

# The specmlx package's own folder: in a checkout, ROOT/specmlx; in a wheel install, site-packages/specmlx.
PACKAGE_ROOT = Path(__file__).resolve().parent
LOG_NAME = "specmlx.log"


def data_dir() -> Path:
    """$SPECMLX_DATA_DIR, else the platform's user data directory
    (~/Library/Application Support/specmlx, $XDG_DATA_HOME/specmlx)."""
    if os.environ.get("SPECMLX_DATA_DIR"):
        return Path(os.environ["SPECMLX_DATA_DIR"]).expanduser()
    return Path(platformdirs.user_data_dir("specmlx", appauthor=False))


def log_path() -> Path:
    """The log file internal errors' tracebacks go to."""
    return data_dir() / LOG_NAME


def checkout_root() -> Path | None:
    """The source checkout this package runs from, if any (not in a wheel install)."""
    root = PACKAGE_ROOT.parent
    return root if (root / "pyproject.toml").is_file() and (root / ".git").exists() else None


def models_dir() -> Path:
    """Where fetched models live: $SPECMLX_MODELS; else a checkout's models/;
    else the platform's user cache (~/Library/Caches/specmlx on macOS,
    $XDG_CACHE_HOME/specmlx on Linux)."""
    if os.environ.get("SPECMLX_MODELS"):
        return Path(os.environ["SPECMLX_MODELS"]).expanduser()
    root = checkout_root()
    if root is not None:
        return root / "models"
    return Path(platformdirs.user_cache_dir("specmlx", appauthor=False))


CACHE_DIR_ENV = "SPECMLX_CACHE_DIR"


def disk_cache_dir() -> Path:
    """Where kept prompts' caches live on disk: $SPECMLX_CACHE_DIR, else the platform's user cache
    (~/Library/Caches/specmlx/prompt-cache on macOS, $XDG_CACHE_HOME/specmlx/prompt-cache on Linux)."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV]).expanduser()
    # Beside fetched models (models_dir in a wheel install), under a name no model folder takes.
    return Path(platformdirs.user_cache_dir("specmlx", appauthor=False)) / "prompt-cache"
