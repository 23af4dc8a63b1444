"""Architectures that mlx-lm does not have: specmlx's MTP head and Gemma 4 assistant drafters."""
