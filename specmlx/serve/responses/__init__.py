"""OpenAI's Responses API: the request bodies (`protocol.py`), their translation into the chat the engine
answers (`translate.py`), the response and its typed stream events (`render.py`), and its errors: OpenAI's
shape, naming the Responses API's own fields (`errors.py`)."""
