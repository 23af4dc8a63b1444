"""`specmlx models list|fetch NAME|path NAME`: get a preset's models ready."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from .. import memory
from ..cli import run_cli
from ..drafters.labels import MTP
from ..errors import SpecmlxError
from ..memory import GB
from ..paths import models_dir
from . import Preset, default_preset_name, get_preset, is_fetched, model_path, presets
from .fetch import fetch_preset


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specmlx models", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="list the presets and whether they are fetched")
    fetch = commands.add_parser("fetch", help="download or convert a preset's models into the models directory (see list)")
    fetch.add_argument("name", nargs="?", help="preset (default: the default preset)")
    fetch.add_argument("--force", action="store_true", help="fetch again even if present")
    path = commands.add_parser("path", help="print where a preset's target (or a drafter) is")
    path.add_argument("name", nargs="?")
    path.add_argument("--role", default="target", help="'target' or a drafter's name")
    return parser


def list_presets() -> None:
    print(f"models directory: {models_dir()}")
    print(f"memory available for models: {memory.available_bytes() / GB:.1f} GB")
    default = default_preset_name()
    for preset in presets().values():
        mark = " (default)" if preset.name == default else ""
        print(f"{preset.name}{mark}: {preset.description}")
        print(f"  {sizes(preset)}")
        for source in preset.sources:
            path = model_path(preset, source.role)
            state = f"fetched at {path}" if is_fetched(path) else "not fetched"
            where = f"bundled {source.bundled}" if source.bundled else f"hub {source.hub or '-'}, offline {source.offline or '-'}"
            where += ", converted on fetch" if source.convert else ""
            print(f"  {source.role}: {state} [{where}]")
        own = " (the target's own MTP layers)" if preset.own_mtp and preset.drafter == MTP else ""
        print(f"  drafter: {preset.drafter}{own}")


def sizes(preset: Preset) -> str:
    """Download and memory, in the GB (2^30 bytes) the memory check reports in."""
    return (f"download {preset.download_bytes / GB:.1f} GB, "
            f"memory {preset.memory_bytes / GB:.1f} GB (4-bit weights + KV/working margin)")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_cli("specmlx models", lambda: run(args))


def run(args: argparse.Namespace) -> int:
    if args.command == "list":
        list_presets()
        return 0
    preset = get_preset(args.name or default_preset_name())
    if args.command == "fetch":
        fetch_preset(preset, force=args.force, log=lambda m: print(m, file=sys.stderr))
        print(model_path(preset))
        return 0
    path = model_path(preset, args.role)
    if args.role != "target" and args.role not in preset.roles:
        raise SpecmlxError(f"preset {preset.name} has no model {args.role!r}")
    if not is_fetched(path):
        raise SpecmlxError(f"{preset.name}/{args.role} is not fetched; run: specmlx models fetch {preset.name}")
    print(path)
    return 0
