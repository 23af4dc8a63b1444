"""The job records by their old module's name, for the worker's imports until they name `jobs.py`."""

from .jobs import Done, Failed, Item, Job, Sink  # noqa: F401
