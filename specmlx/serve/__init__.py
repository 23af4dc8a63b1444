"""`specmlx serve`: OpenAI's chat and completions API over exact speculative decoding.

Per endpoint, as vLLM's entry points: `protocol.py` holds the request bodies
and a job's records, `routes.py` the HTTP routes (parse, authorize, stream or
answer whole), and `serving.py` turns a request into a job and builds the
server (`build`: slots, worker, app) for the command line, the bench and the
tests alike. `worker.py` runs jobs one at a time on the MLX thread with
`slots.py`'s kept conversations; `mirror.py` is the seam through which a
sharded target's other ranks keep the same slots (`specmlx.distributed.serve`;
nothing by default). `render.py` writes OpenAI's response objects,
`errors.py` its error shape, `limits.py` who may call, and `run.py` runs uvicorn.
"""
