"""The server's benchmarks, apart from the runtime package (`specmlx.serve` imports nothing from here).

`python -m specmlx.bench.serve` (`cli.py`): what the server costs, and how it
holds under load; with `--clients 1,2,4,...`, the client sweep (`sweep.py`)
against mlx_lm.server. `clients.py` holds their streaming clients, which run in
a process of their own. `python -m specmlx.bench.serve.fim` (`fim.py`): what a
fill-in-the-middle request costs, with and without drafting. `python -m
specmlx.bench.serve.replay` (`replay.py`): an agent session (`session.json`)
replayed against `specmlx serve` processes, with and without the disk cache and
drafters, a restart in the middle.
"""
