"""The one exception type users see: a message fit to print on a single line."""


class SpecmlxError(Exception):
    """Bad input or an unusable model: the CLI prints it as one line and exits 2."""
