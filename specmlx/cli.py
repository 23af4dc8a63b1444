"""`specmlx COMMAND ...`: one entry point for every command line of the package.

Each command keeps its own module and parser (`python -m specmlx.bench` and
the like still work); this only picks the module, so `specmlx bench --help`
is the bench's own help. Every command's `main` reports its errors through
`run_cli`: one line on stderr, the traceback of a bug in the log file.
"""

from __future__ import annotations

import importlib
import sys
from typing import Callable, Sequence

from .errors import SpecmlxError
from .log import user_error

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

    ensure_fast_blas()  # before MLX is imported (Linux CPU): may re-execute this process
    # The command's own main reports its errors; this catches a broken installation's import error.
    return run_cli(f"specmlx {name}", lambda: importlib.import_module(COMMANDS[name][0]).main(rest))


def run_cli(prog: str, body: Callable[[], int]) -> int:
    """Run a command's body: errors become one line on stderr, never a traceback.

    Exit codes: 2 for SpecmlxError and system errors (disk full, permission
    denied, whose own message says enough), 1 for anything else (a bug: its
    traceback goes to the log file the line names), 130 for Ctrl-C.
    """
    try:
        return body()
    except (SpecmlxError, OSError) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\n{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - the user gets a sentence, the log the traceback
        print(f"{prog}: error: {user_error(err, prog.removeprefix('specmlx ') + ' failed')}", file=sys.stderr)
        return 1
