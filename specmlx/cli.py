"""`specmlx COMMAND ...`: one entry point for every command line of the package.

Each command keeps its own module and parser (`python -m specmlx.bench` and
the like still work); this only picks the module, so `specmlx bench --help`
is the bench's own help.
"""

from __future__ import annotations

import importlib
import sys
from typing import Sequence

# command -> (module with a `main(argv)`, one line for `specmlx --help`)
COMMANDS = {
    "generate": ("specmlx.generate", "generate text from a prompt with a target and a drafter"),
    "models": ("specmlx.presets.cli", "list, fetch and locate the preset models"),
    "convert": ("specmlx.convert.cli", "convert a Hugging Face or GGUF checkpoint to MLX"),
    "bench": ("specmlx.bench.cli", "measure speed against plain decoding and mlx-lm"),
    "train": ("specmlx.train.cli", "train an MTP drafter head on a target's hidden states"),
    "serve": ("specmlx.serve.cli", "serve OpenAI's chat and completions API on this machine"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()]
    return "\n".join(["usage: specmlx COMMAND [ARGS...]", "", "commands:", *lines, "",
                      "`specmlx COMMAND --help` describes a command; `specmlx-chat` starts the chat app."])


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help"}:
        print(usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"specmlx: error: unknown command {name!r} (choose from {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    from .blas import ensure_fast_blas
    from .errors import run_cli

    ensure_fast_blas()  # before MLX is imported (Linux CPU): may re-execute this process
    # The command's own main reports its errors; this catches a broken installation's import error.
    return run_cli(f"specmlx {name}", lambda: importlib.import_module(COMMANDS[name][0]).main(rest))
