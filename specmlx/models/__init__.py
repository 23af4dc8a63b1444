"""`python -m specmlx.models list|fetch NAME|path NAME`: get a preset's models ready."""
