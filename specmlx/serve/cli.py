"""`specmlx serve ...`: the HTTP server's command line.

One target and its drafters, served over OpenAI's chat completions, text
completions (fill in the middle with `suffix`) and Responses, and Anthropic's
Messages, streamed or not; requests are decoded together in a continuous batch
(`--max-batch`), in kept conversations (`--slots`). It listens on loopback
unless `--host` says otherwise, behind `--api-key` if given. With
`--distributed`, rank 0 listens and the other ranks follow its jobs, one at a
time. The port is bound before the models load, so a port in use is one line
at once; Ctrl+C ends open requests with an error and stops the server.
"""

from __future__ import annotations

import argparse
import math
import ipaddress
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Sequence

from mlx_lm.generate import maybe_set_recommended_wired_limit

from ..cli import run_cli
from ..diskcache.fingerprint import fingerprint
from ..diskcache.keeper import DEFAULT_GB as DISK_CACHE_GB, Keeper, open_store
from ..diskcache.store import DiskCache
from ..distributed import Lockstep
from ..distributed.cli import add_arguments as add_distributed_arguments, joined, leads, placement
from ..distributed.output import end
from ..distributed.serve import RankMirror, follow
from ..drafters import MTP, NGRAM, NONE, SUFFIX
from ..config import GenerationConfig
from ..errors import SpecmlxError
from ..loading import load_models, ships_mtp
from ..memory import FREE_SHARE, GB, memory_limit, size_text
from ..mlx_thread import MLXThread, closed_on_error
from ..paths import CACHE_DIR_ENV
from ..kv_flags import add_kv_arguments
from ..options import (Parser, add_draft_arguments, add_model_arguments, add_sampling_arguments,
                       draft_policy, kv_bits, sampling_params)
from ..vision.checkpoint import has_vision, load_vision
from ..vision.tower import VisionTower
from ..warmup import warm_up_at_load
from .limits import Access
from .run import Server, bind
from .mirror import NO_MIRROR, Mirror
from .builder import MAX_BATCH, Built, build
from .slots import MAX_SLOTS, MIN_SLOTS, TOKENS_PER_SLOT


API_KEY_ENV = "SPECMLX_API_KEY"


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="specmlx serve", description="Serve a target and its drafters over HTTP: OpenAI's chat "
               "completions, text completions (fill in the middle with suffix) and Responses, and Anthropic's "
               "Messages, streamed or not; requests are decoded together in a continuous batch.")
    add_model_arguments(p, preset="a preset: its target and drafter (default: the default preset)", repeat=True,
                        drafter="one to load, repeatable; the first is the default, and a request picks one by "
                        "name (speculative.drafter); ngram, suffix and none are always offered (default: the preset's "
                        "drafter)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on; 0: any free one (default 8000)")
    p.add_argument("--api-key", action="append", default=[], metavar="KEY",
                   help="require the key (Authorization: Bearer KEY, or x-api-key: KEY) on every route but "
                   "/health; repeatable: each key's conversations are kept apart (default: "
                   f"${API_KEY_ENV}; empty means none)")
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="a web page origin (e.g. http://localhost:3000, or *) whose scripts may call the server "
                   "from a browser; repeatable; * only with --api-key (default: none)")
    p.add_argument("--max-queue", type=int, default=32, help="requests that may wait; more get 429 with a "
                   "Retry-After (default 32)")
    p.add_argument("--max-batch", type=int, default=MAX_BATCH, help="requests decoded at once, in one batch, "
                   "each in a slot of its own (so at most --slots); 1 serves one at a time, as a sharded target "
                   f"always does (default {MAX_BATCH})")
    p.add_argument("--slots", type=int, default=None, help="conversations whose KV caches are kept between "
                   f"requests (default: as many as --cache-gb holds at {TOKENS_PER_SLOT} tokens each, "
                   f"{MIN_SLOTS} to {MAX_SLOTS}, and at least --max-batch)")
    p.add_argument("--cache-gb", type=float, default=4.0, help="most memory the kept caches may hold: KV caches, "
                   "and the target's hidden states an MTP-style drafter keeps (default 4)")
    p.add_argument("--memory-gb", type=float, default=None, help="most memory the model and every request's "
                   "context may hold; a request whose context cannot fit waits for others, or has its answer cut "
                   "to fit, and a prompt too long for it is refused (default: the GPU's recommended working set, "
                   f"else what the model holds and {FREE_SHARE * 100:.0f}%% of the memory free at start)")
    p.add_argument("--disk-cache-gb", type=float, default=DISK_CACHE_GB, help="most disk the prompt cache may "
                   "hold: kept prompts' caches, restored by a later request and after a restart; least recently "
                   f"used go first; in ${CACHE_DIR_ENV} or the user cache folder (default {DISK_CACHE_GB:g})")
    p.add_argument("--no-disk-cache", action="store_true", help="keep prompts' caches in memory only")
    p.add_argument("--max-tokens", type=int, default=512, help="tokens generated when a request does not say, "
                   "at most what the context window leaves (default 512)")
    p.add_argument("--max-body-mb", type=float, default=4.0, help="largest request body accepted, in MiB; a "
                   "larger one gets 413 (default 4)")
    add_sampling_arguments(p, per_request=True)
    add_draft_arguments(p, per_request=True)
    add_kv_arguments(p)
    p.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn's log level; info and debug also log every request (default warning)")
    add_distributed_arguments(p)
    return p


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def curl_line(base: str, model: str, api_key: bool) -> str:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Say hello."}]})
    key = " -H 'Authorization: Bearer $SPECMLX_API_KEY'" if api_key else ""
    return f"curl {base}/v1/chat/completions -H 'Content-Type: application/json'{key} -d '{body}'"


def api_keys(given: list[str], environ: dict[str, str]) -> tuple[tuple[str, ...], str | None]:
    """The keys from --api-key, else $SPECMLX_API_KEY, and a line to say when that is set but empty.
    Keys are stripped, as the header's key is: a key read from a file keeps its newline."""
    if given:
        if not all(key.strip() for key in given):
            raise SpecmlxError("--api-key must not be empty")
        return tuple(key.strip() for key in given), None
    key = environ.get(API_KEY_ENV)
    if key is not None and not key.strip():  # an empty key would turn auth on with a key nobody can send
        return (), f"{API_KEY_ENV} is set but empty: no API key is required"
    return ((key.strip(),) if key else ()), None


def access(args: argparse.Namespace, keys: tuple[str, ...]) -> Access:
    if "*" in args.cors_origin and not keys:
        raise SpecmlxError("--cors-origin * lets every web page this machine's browser opens use the server: "
                           "set --api-key too, or name the page's origin")
    return Access(keys, int(args.max_body_mb * (1 << 20)), is_loopback(args.host), tuple(args.cors_origin))


def own_mtp(args: argparse.Namespace, loud: bool = True) -> list[str]:
    """`mtp` where the target directory ships MTP layers of its own: offered beside the drafters asked
    for, in one process only (sharding them with the target is untested; `loud`: say so in one line)."""
    if not (args.target and ships_mtp(args.target)):
        return []
    if args.distributed:
        if loud:
            print(f"note: {args.target} ships its own MTP layers; mtp is not offered with --distributed",
                  file=sys.stderr)
        return []
    return [MTP]


def serve(args: argparse.Namespace) -> int:
    for name in ("max_queue", "max_batch", "slots", "max_tokens", "port"):
        if getattr(args, name) is not None and getattr(args, name) < (0 if name == "port" else 1):
            raise SpecmlxError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    keys, key_note = api_keys(args.api_key, dict(os.environ))
    allowed = access(args, keys)
    defaults_policy, sampling = draft_policy(args), sampling_params(args)
    GenerationConfig(max_tokens=args.max_tokens, sampling=sampling, policy=defaults_policy)  # checks them now
    if not (math.isfinite(args.disk_cache_gb) and args.disk_cache_gb > 0) and not args.no_disk_cache:
        raise SpecmlxError(f"--disk-cache-gb must be a number of GB above 0, got {args.disk_cache_gb:g} "
                           "(--no-disk-cache turns it off)")
    if args.memory_gb is not None and not (math.isfinite(args.memory_gb) and args.memory_gb > 0):
        raise SpecmlxError(f"--memory-gb must be a number of GB above 0, got {args.memory_gb:g}")
    with joined(args) as group:
        # Rank 0 alone listens: a port in use is one line now, not after minutes of loading.
        sock = bind(args.host, args.port) if leads(group) else None
        if key_note and leads(group):
            print(key_note, file=sys.stderr)
        say = (lambda step: print(f"{step}...", file=sys.stderr)) if sys.stderr.isatty() and leads(group) else (
            lambda step: None)
        # suffix remembers each key's session on rank 0 alone: a sharded target's ranks do not offer it.
        offered = [NGRAM, NONE] if args.distributed else [NGRAM, SUFFIX, NONE]
        specs = list(dict.fromkeys([*(args.drafter or [None]), *own_mtp(args, leads(group)), *offered]))
        where = placement(args, group)
        if not leads(group):  # loads its shard, then runs rank 0's jobs with it until rank 0 ends
            loaded = load_models(args.preset or args.target, specs, placement=where)
            return follow(loaded.peers, loaded.target.model, loaded.target.tokenizer, loaded.drafters[0].name,
                          kv_bits(args))
        # Opened before minutes of loading: a folder it cannot use is one line now.
        store = None if args.no_disk_cache or args.distributed else disk_store(args)
        with closed_on_error(MLXThread()) as mlx:  # with ranks, every collective of rank 0 runs on it, in order
            mlx.call(maybe_set_recommended_wired_limit)  # on Metal, as mlx_lm.server does: the weights stay wired
            loaded = mlx.call(load_models, args.preset or args.target, specs, say, where)
            mlx.call(warm_up_at_load, loaded.target.model, loaded.drafters, defaults_policy,
                     loaded.peers.one_process, say, kv_bits(args))
            lockstep = loaded.peers.lockstep()
            mirror = NO_MIRROR if lockstep is None else RankMirror(lockstep)  # the other ranks keep rank 0's slots
            kv = kv_bits(args)
            disk = None if store is None else Keeper(store, fingerprint(loaded.target.path, kv=kv))
            memory = int(args.memory_gb * GB) if args.memory_gb is not None else mlx.call(memory_limit)
            vision = None if args.distributed else mlx.call(vision_of, loaded.target.path, say)
            built = build(mlx, loaded.target, loaded.drafters, policy=defaults_policy, sampling=sampling,
                          max_tokens=args.max_tokens, access=allowed, slots=args.slots,
                          cache_bytes=int(args.cache_gb * GB), max_queue=args.max_queue,
                          mirror=mirror, max_batch=args.max_batch, disk=disk, memory_bytes=memory, vision=vision,
                          kv=kv)
        return listen(args, allowed, sock, built, mirror, loaded.target, loaded.drafters, lockstep)


def vision_of(path: Path, say) -> VisionTower | None:
    """The target's vision tower, if its checkpoint has one; one line where it cannot be read (the server
    then serves text, and refuses images as a model without a tower does)."""
    if not has_vision(path):
        return None
    say("loading the vision tower")
    try:
        return load_vision(path)
    except SpecmlxError as err:
        print(f"note: images are not read: {err}", file=sys.stderr)
        return None


def disk_store(args: argparse.Namespace) -> DiskCache:
    """The prompt cache on disk, its lines (skipped entries) on stderr."""
    log = logging.getLogger("specmlx.diskcache")
    if not log.handlers:
        line = logging.StreamHandler(sys.stderr)
        line.setFormatter(logging.Formatter("specmlx serve: %(message)s"))
        log.addHandler(line)
    return open_store(int(args.disk_cache_gb * GB))


def listen(args: argparse.Namespace, allowed: Access, sock, built: Built, mirror: Mirror, target, drafters,
           lockstep: Lockstep | None) -> int:
    """Serve until Ctrl+C (exit 0), or until a sharded target loses a rank (one line, exit 2)."""
    worker = built.worker
    host = f"[{args.host}]" if ":" in args.host else args.host
    base = f"http://{host}:{sock.getsockname()[1]}"
    sharded = f" sharded over {lockstep.group.size} ranks" if lockstep is not None else ""
    print(f"specmlx serve: {target.name} ({target.path}){sharded}, drafters: "
          + ", ".join(f"{n} (default)" if n == drafters[0].name else n for n in worker.slots.drafters), file=sys.stderr)
    keys = len(allowed.api_keys)
    print(f"listening on {base}/v1" + ((" (API key required)" if keys == 1 else f" ({keys} API keys)") if keys else "")
          + f"; {worker.slots.count} kept conversations", file=sys.stderr)
    if not is_loopback(args.host) and not keys:
        print(f"warning: {args.host} is reachable from other machines and no --api-key is set", file=sys.stderr)
    disk = worker.slots.disk
    if disk is not None:
        print(f"prompt cache on disk: {disk.store.root} ({size_text(disk.store.total_bytes())} of "
              f"{size_text(disk.store.cap_bytes)} held)", file=sys.stderr)
    elif args.distributed and not args.no_disk_cache:
        print("note: the prompt cache on disk is off with --distributed", file=sys.stderr)
    if built.vision is not None:
        print("images: read by the target's vision tower (data URLs)", file=sys.stderr)
    if args.kv_bits is not None:
        print(f"keys and values: {args.kv_bits} bits in groups of {args.kv_group_size} (--kv-bits)", file=sys.stderr)
    limit = worker.slots.memory_limit
    if limit is not None:
        print(f"memory: {size_text(limit)} for the model and the requests' contexts (--memory-gb)", file=sys.stderr)
    print(f"try: {curl_line(base, target.name, bool(keys))}", file=sys.stderr)
    server = Server(built.app, worker, args.log_level)
    worker.on_lost = server.stop  # a sharded target that lost a rank cannot answer again
    mirror.watch(worker.lose)
    # uvicorn raises the signal that stopped it again once it has shut down. SIGTERM (docker stop,
    # systemd) would then kill the process before the worker closes: make it a Ctrl+C.
    terminate = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # the normal way to stop
        pass
    finally:
        signal.signal(signal.SIGTERM, terminate)
        if worker.lost is None:  # else the MLX thread may wait forever in a collective: leave it
            worker.close()
    if worker.lost is not None:
        end(f"{worker.lost}; stopping", "specmlx serve")
    print("specmlx serve: stopped", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("specmlx serve", lambda: serve(build_parser().parse_args(argv)))
