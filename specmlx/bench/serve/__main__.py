import sys

from ...blas import ensure_fast_blas

ensure_fast_blas()  # before mlx is imported: it may re-execute this process

from .cli import main  # noqa: E402

sys.exit(main())
