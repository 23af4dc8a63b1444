"""specmlx: exact speculative decoding on MLX."""

__version__ = "0.1.0"
