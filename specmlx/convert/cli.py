"""`specmlx convert SOURCE --out DIR`: argument parsing and one-line errors."""

from __future__ import annotations

import argparse

from specmlx.cli import run_cli
from specmlx.convert.api import convert
from specmlx.convert.options import DTYPES


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specmlx convert",
        description="Convert a GGUF file, a local Hugging Face directory or a hub repo id into an MLX model directory.",
    )
    parser.add_argument("source", help="GGUF file, Hugging Face model directory, or hub repo id (org/name)")
    parser.add_argument("--out", required=True, help="output directory (written atomically)")
    parser.add_argument(
        "--dtype", choices=DTYPES, help="weight dtype (default: float32 on CPU; float16 with 4-bit weights on Metal)"
    )
    parser.add_argument(
        "-q", "--quantize", action="store_true", default=None, help="quantize Linear/Embedding weights (default on Metal)"
    )
    parser.add_argument("--q-bits", type=int, help="bits per quantized weight (default 4; implies -q)")
    parser.add_argument("--q-group-size", type=int, help="quantization group size (default 64; implies -q)")
    parser.add_argument("--force", action="store_true", help="replace an existing output directory")
    parser.add_argument("--sha256", help="expected SHA-256 of a GGUF source (known checkpoints are checked anyway)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the converter; 0 on success, 2 (one line on stderr) on a user-facing error."""
    args = build_parser().parse_args(argv)

    def body() -> int:
        out = convert(
            args.source,
            args.out,
            dtype=args.dtype,
            quantize=args.quantize,
            force=args.force,
            sha256=args.sha256,
            q_bits=args.q_bits,
            q_group_size=args.q_group_size,
            progress=not args.no_progress,
        )
        print(out)
        return 0

    return run_cli("specmlx convert", body)
