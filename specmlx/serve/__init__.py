"""`specmlx serve`: OpenAI's and Anthropic's APIs over exact speculative decoding.

A folder per API dialect, each with its request bodies (`protocol.py`), its renderer of the answer
(`render.py`) and its error shape (`errors.py`): `openai/` (chat completions, completions; its
error shape is every other route's too), `anthropic/` (messages, count_tokens) and `responses/`
(OpenAI's Responses API). Anthropic's and the Responses API's requests are translated
(`translate.py`, with the parts they share in `chat.py`) into the chat request of the same
conversation, so every chat takes one path: its prompt through the model's template
(`prompts.py`, `tools.py`), its job, its answer's calls read back (`calls.py`).

`builder.py` builds the server in one place (slots, worker, app) for the command line, the bench
and the tests. `routes.py` speaks HTTP (parse, authorize, stream or answer whole); `serving.py`
turns each route's request into a job (`jobs.py`) and a reply: one `Reply` protocol over one
answer feed (`reply.py`: text pieces, calls, sources) that the three dialects render. The worker
runs jobs on the MLX thread with `slots.py`'s kept conversations, through one runner (`runner.py`:
one at a time for a mirror, else the continuous batch of `batching.py`) and one ledger (`ledger.py`:
the queue's count, the records, `Retry-After`, how a job ends); `mirror.py` is the seam through
which a sharded target's other ranks keep the same slots (`specmlx.distributed.serve`; nothing by
default). `errors.py` routes every failure to its API's shape, `limits.py` says who may call,
`aliases.py` answers any model name with the served target, `fim.py` lays out fill-in-the-middle
prompts, and `run.py` runs uvicorn. What the server costs is measured outside it, by
`specmlx.bench.serve`.
"""
