"""Continuous batching: many generations sharing one target forward a round.

Rows join and leave between rounds (`batch.py`). Each row keeps its own
drafter, draft length, sampling settings and seed; one target forward
scores every row's `[last, d1..dk_i]` (`round.py`), verification is per
row, and each row's cache keeps exactly its committed tokens (`caches/batch.py`).
"""

from .batch import Batch, Member

__all__ = ["Batch", "Member"]
