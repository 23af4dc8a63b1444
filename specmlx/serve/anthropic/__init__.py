"""Anthropic's Messages API: the request bodies (`protocol.py`), their translation into the chat the engine
answers (`translate.py`), the answer and its typed stream events (`render.py`), and Anthropic's error shape
(`errors.py`) on its routes.

Imported as `specmlx.serve.anthropic`, never bare: the `anthropic` client package keeps its own name."""
