"""`--kv-bits` and `--kv-group-size` (mlx-lm's names), in a module that imports no MLX: the chat app parses
its arguments before MLX is imported (`blas.ensure_fast_blas` may re-execute the process), and takes the
same flags as `generate`, `serve` and `bench` (`options.kv_bits` reads them as a `caches.kinds.KVBits`)."""

from __future__ import annotations

import argparse

KV_BITS = (4, 8)  # what `--kv-bits` takes
KV_GROUP = 64  # its group size by default, mlx-lm's
KV_GROUPS = (32, 64, 128)  # the group sizes mlx's quantization takes


def add_kv_arguments(parser: argparse.ArgumentParser) -> None:
    """--kv-bits and --kv-group-size: the target's keys and values kept quantized."""
    parser.add_argument("--kv-bits", type=int, choices=KV_BITS, default=None, metavar="{4,8}",
                        help="keep the target's keys and values at 8 or 4 bits (mlx's affine quantization): about "
                        "half or a quarter of a 16-bit cache's memory a token, for long contexts; the answer is the "
                        "target's own with that cache, exactly, speculation or not (default: as the weights)")
    parser.add_argument("--kv-group-size", type=int, choices=KV_GROUPS, default=KV_GROUP, metavar="N",
                        help=f"values sharing a scale and a bias in --kv-bits (default {KV_GROUP})")
