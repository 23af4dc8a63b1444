"""Entry point of `python -m specmlx.convert`."""

from specmlx.convert.cli import main

raise SystemExit(main())
