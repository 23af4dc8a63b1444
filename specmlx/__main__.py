"""`python -m specmlx COMMAND ...`, the same as the `specmlx` console script."""

import sys

from .cli import main

sys.exit(main())
