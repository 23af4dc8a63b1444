"""`specmlx-chat` (or `python -m app`): the terminal chat, on the default preset unless told otherwise."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from specmlx.kv_flags import add_kv_arguments


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specmlx-chat",
        description="Offline terminal chat with exact speculative decoding; "
                    "shows which tokens the drafter guessed right.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--target", help="target model: a preset name, an MLX model directory or a Hugging Face "
                                         "repo id (default: the default preset)")
    source.add_argument("--preset", help="a preset name (specmlx models list); the same as --target NAME")
    parser.add_argument("--drafter", help="drafter: a preset name, model directory or repo id, 'ngram', 'suffix', "
                                          "'none', or a drafter of the preset (e.g. mtp); "
                                          "default: the preset's drafter, or ngram with --target DIR")
    parser.add_argument("--system", default="", help="system prompt for new chats")
    add_kv_arguments(parser)  # MLX-free: parsed before MLX is imported
    parser.add_argument("--no-disk-cache", action="store_true", help="keep chats' caches in memory only (default: "
                        "kept on disk too, so a reopened chat continues without prefilling it again)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from specmlx.blas import ensure_fast_blas

    ensure_fast_blas()  # before MLX is imported (Linux CPU): may re-execute this process
    from .app import SpecApp

    from specmlx.options import kv_bits

    app = SpecApp(target=args.target or args.preset, drafter=args.drafter, system=args.system,
                  disk_cache=not args.no_disk_cache, kv=kv_bits(args))
    try:
        app.run()
    finally:
        app.close_resources()
    return app.return_code or 0


if __name__ == "__main__":
    sys.exit(main())
