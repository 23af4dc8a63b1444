"""OpenAI's chat completions and completions: the request bodies (`protocol.py`), the answers and their
stream chunks (`render.py`), and OpenAI's error shape (`errors.py`), which every route but Anthropic's takes.

Imported as `specmlx.serve.openai`, never bare: the `openai` client package keeps its own name."""
