"""`python -m app.screenshot --out docs/app.svg`: the app's picture, taken headless.

Starts the app at a fixed terminal size on the given models (default: the
default preset), asks one question, waits for the whole answer and saves an
SVG of the screen. With --baseline it measures plain decoding first, so the
speedup shows. Used for the README's screenshot.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from time import monotonic
from typing import Sequence


PROMPT = "Write a Python function that checks whether a number is prime."


async def wait(pilot, predicate, timeout: float, what: str) -> None:
    deadline = monotonic() + timeout
    while not predicate():
        if monotonic() > deadline:
            raise SystemExit(f"app.screenshot: timed out waiting for {what}")
        await pilot.pause(0.1)


async def shoot(args: argparse.Namespace) -> str:
    from .app import SpecApp  # MLX is imported only after ensure_fast_blas
    from .screens.chat import ChatScreen
    from .settings import ChatSettings
    from .widgets.answer import AnswerView

    settings = ChatSettings(max_tokens=args.max_tokens, system=args.system)
    app = SpecApp(target=args.target or args.preset, drafter=args.drafter, settings=settings,
                  data_dir=args.data_dir, cursor_blink=False)
    async with app.run_test(size=(args.width, args.height)) as pilot:
        await wait(pilot, lambda: isinstance(app.screen, ChatScreen), args.timeout, "the models to load")
        screen = app.screen
        screen.query_one("#prompt").value = args.prompt
        await pilot.press("enter")
        idle = lambda: screen.query(AnswerView) and not screen.busy  # noqa: E731
        await wait(pilot, idle, args.timeout, "the answer")
        if args.baseline:
            await pilot.press("ctrl+b")
            await wait(pilot, lambda: screen.figures.baseline_tps is not None, args.timeout, "the baseline")
        if args.markdown:
            await pilot.press("ctrl+r")
        await pilot.pause(0.5)
        svg = app.export_screenshot(title="specmlx")
    app.close_resources()
    return svg


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.screenshot", description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--target")
    source.add_argument("--preset")
    parser.add_argument("--drafter")
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--system", default="")
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--baseline", action="store_true", help="measure plain decoding too, to show the speedup")
    parser.add_argument("--markdown", action="store_true", help="show the answer as Markdown")
    parser.add_argument("--width", type=int, default=120)
    parser.add_argument("--height", type=int, default=40)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--data-dir", type=Path, help="history for this run (default: a fresh temporary one)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    from specmlx.blas import ensure_fast_blas

    ensure_fast_blas()
    if args.data_dir is None:
        import tempfile

        args.data_dir = Path(tempfile.mkdtemp(prefix="specmlx-shot-"))
    svg = asyncio.run(shoot(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(svg, encoding="utf-8")
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
