"""The server's tiny models, as the server's own tests build them: the benches measure that server."""

from ...serve.conftest import fim_dirs, fim_tokenizer, served_dirs  # noqa: F401 - fixtures, found by name
