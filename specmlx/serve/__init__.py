"""`specmlx serve`: OpenAI's chat and completions API over exact speculative decoding.

`cli.py` loads the models and starts uvicorn (`run.py`); `app.py` holds the
routes, `protocol.py` the request bodies and a job's records, `jobs.py` turns a request into a
job, `worker.py` runs jobs one at a time on the MLX thread with `slots.py`'s
kept conversations, and `render.py` writes OpenAI's response objects.
"""
