"""The agent-session replay: the packaged session's shape, the requests built from it, an answer read
from its stream, the replay's loop around a stand-in server, and the report's arithmetic; no model."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from specmlx.bench.serve import replay as replay_module
from specmlx.bench.serve.messages import Answered, read_stream
from specmlx.bench.serve.process import Refused, ServeProcess
from specmlx.bench.serve.replay import CONFIGS, configs_spec, main, replay_on, server_flags
from specmlx.bench.serve.replay_report import Run, agreement, figures, report, restart_goal, subagents, totals
from specmlx.bench.serve.session import MAIN, SESSION_PATH, Request, Restart, plan, read_session
from specmlx.errors import SpecmlxError
from specmlx.serve.anthropic.protocol import MessagesRequest
from specmlx.serve.anthropic.translate import to_chat


@pytest.fixture(scope="module")
def session() -> dict:
    return read_session()


def turns(session: dict) -> list[dict]:
    return [s for s in session["steps"] if s["kind"] == "turn"]


def blocks(message: dict, kind: str) -> list[dict]:
    return [b for b in message["content"] if isinstance(b, dict) and b.get("type") == kind]


# -- the session ------------------------------------------------------------------------------


def test_the_session_has_the_promised_shape(session):
    """A long system prompt and 12-20 tool schemas; at least ten turns of the parent agent with tool calls;
    one subagent with a single request; one restart, between two of the parent's turns."""
    assert len(session["system"]) > 3000
    assert 12 <= len(session["tools"]) <= 20
    assert all(t["input_schema"]["type"] == "object" and t["description"] for t in session["tools"])
    assert len({t["name"] for t in session["tools"]}) == len(session["tools"])
    main_turns = [s for s in turns(session) if s["thread"] == MAIN]
    assert len(main_turns) >= 10
    assert Counter(s["thread"] for s in turns(session) if s["thread"] != MAIN) == {"subagent": 1}
    kinds = [s["kind"] if s["kind"] == "restart" else s["thread"] for s in session["steps"]]
    assert kinds.count("restart") == 1
    at = kinds.index("restart")
    assert kinds[at - 1] == kinds[at + 1] == MAIN and "subagent" in kinds[:at]
    assert sum(len(blocks(s["assistant"], "tool_use")) for s in main_turns) >= 8


def test_every_tool_result_answers_an_earlier_call_of_its_thread(session):
    called: dict[str, set[str]] = {}
    for s in turns(session):
        ids = called.setdefault(s["thread"], set())
        assert {b["tool_use_id"] for b in blocks(s["user"], "tool_result")} <= ids, s["id"]
        ids |= {b["id"] for b in blocks(s["assistant"], "tool_use")}
    uses = [b["id"] for s in turns(session) for b in blocks(s["assistant"], "tool_use")]
    assert len(uses) == len(set(uses))


def content_lines(text: str) -> set[str]:
    """A tool result's lines without the Read tool's numbers or a diff's markers."""
    return {re.sub(r"^\s*\d+\t", "", line).lstrip("+-").strip() for line in text.splitlines()}


def test_tool_results_recur_across_turns(session):
    """What an agent reads back comes again: every test run's header, a file's lines in a later edit's snippet
    and in the diff: what a drafter that remembers the session may find."""
    seen: Counter = Counter()
    for s in turns(session):
        seen.update(line for b in blocks(s["user"], "tool_result") for line in content_lines(b["content"])
                    if len(line) >= 30)
    assert len([line for line, count in seen.items() if count >= 2]) >= 15
    assert seen["total += float(amount) * UNITS[unit]"] == 3  # read, in the edit's snippet, in the diff
    assert seen["platform darwin -- Python 3.12.4, pytest-8.3.2, pluggy-1.5.0"] == 3  # every pytest run


def test_every_request_is_one_the_server_takes(session):
    """Each body is a valid Messages request that translates into a chat (every tool_result after its call)."""
    for item in plan(session, 32):
        if isinstance(item, Request):
            chat = to_chat(MessagesRequest.model_validate(item.body))
            assert chat.temperature == 0.0 and chat.max_tokens == 32 and chat.stream, item.step


# -- the requests -----------------------------------------------------------------------------


def test_requests_are_the_recorded_history_and_the_same_every_time(session):
    first = plan(session, 16)
    assert json.dumps([vars(i) for i in first]) == json.dumps([vars(i) for i in plan(read_session(), 16)])
    requests = [i for i in first if isinstance(i, Request)]
    assert [i.step for i in first if isinstance(i, Request)] == [s["id"] for s in turns(session)]
    assert sum(isinstance(i, Restart) for i in first) == 1
    recorded = {s["id"]: s for s in turns(session)}
    parent = [r for r in requests if r.thread == MAIN]
    for before, after in zip(parent, parent[1:]):  # each turn: the one before, its recorded answer, a new message
        step = recorded[before.step]
        assert after.body["messages"] == before.body["messages"] + [step["assistant"], recorded[after.step]["user"]]
    sub = next(r for r in requests if r.thread != MAIN)
    assert sub.body["messages"] == [recorded[sub.step]["user"]]
    for r in requests:  # the prefix every request shares
        assert r.body["system"] == requests[0].body["system"] and r.body["tools"] is session["tools"]
        assert r.body["speculative"] == {"sources": True} and r.body["max_tokens"] == 16


def test_turns_keeps_the_first_requests_and_a_restart_only_before_one(session):
    steps = [s["kind"] if s["kind"] == "restart" else "turn" for s in session["steps"]]
    before = steps.index("restart")
    cut = plan(session, 8, turns=before)
    assert len(cut) == before and all(isinstance(i, Request) for i in cut)
    assert isinstance(plan(session, 8, turns=before + 1)[before], Restart)
    assert len(plan(session, 8, turns=1)) == 1
    ending = session | {"steps": [*session["steps"], {"kind": "restart"}]}  # nothing to restart for
    assert isinstance(plan(ending, 8)[-1], Request)


def test_a_broken_session_is_one_line(tmp_path, session):
    path = tmp_path / "s.json"
    for broken, words in [({"model": "m"}, "has no system, tools, steps"),
                          ({"steps": [{"kind": "pause"}]}, "kind is 'pause'"),
                          ({"steps": [{"kind": "turn", "id": "a", "thread": MAIN,
                                       "user": {"role": "user", "content": "hi"}}]}, "needs its assistant message")]:
        path.write_text(json.dumps(session | broken if "model" not in broken else broken))
        with pytest.raises(SpecmlxError, match=words):
            read_session(path)
    path.write_text("{")
    with pytest.raises(SpecmlxError, match="cannot read the session"):
        read_session(path)


# -- an answer, from its stream ---------------------------------------------------------------


def event(data: dict) -> list[str]:
    return [f"event: {data['type']}", f"data: {json.dumps(data)}", ""]


def stream(usage: dict, rounds: list[list[int]], at: list[float], end_at: float) -> list[tuple[float, str]]:
    """Timed SSE lines as the server sends them: a round's tokens on its piece's last event."""
    lines = [(0.1, line) for line in event({"type": "message_start", "message": {}})]
    for t, tokens in zip(at, rounds):
        lines += [(t, line) for line in event({"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "text_delta", "text": "x" * len(tokens)},
                                               "speculative": {"tokens": tokens, "sources": ["target"] * len(tokens)}})]
    delta = {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": usage,
             "speculative": {"rounds": len(rounds)}}
    return lines + [(end_at, line) for line in event(delta) + event({"type": "message_stop"})]


REQUEST = Request("t3", MAIN, {"max_tokens": 8})


def test_an_answer_is_read_from_its_stream():
    usage = {"input_tokens": 100, "cache_read_input_tokens": 900, "disk_read_input_tokens": 600, "output_tokens": 7}
    a = read_stream(stream(usage, [[5], [6, 7, 8], [9, 10, 11]], [2.0, 2.5, 3.0], 3.2), REQUEST, 60)
    assert (a.step, a.thread, a.tokens, a.first_s, a.last_s, a.wall_s) == ("t3", MAIN, (5, 6, 7, 8, 9, 10, 11), 2.0, 3.0, 3.2)
    assert (a.prompt_tokens, a.cached_tokens, a.disk_tokens, a.memory_tokens, a.prefilled) == (1000, 900, 600, 300, 100)
    assert a.tokens_per_s == pytest.approx(6 / 1.0) and a.tokens_per_round == pytest.approx(7 / 3)
    assert a.text == "xxxxxxx"
    older = read_stream(stream({"input_tokens": 10, "cache_read_input_tokens": 5}, [[1, 2]], [1.0], 1.0), REQUEST, 60)
    assert (older.disk_tokens, older.memory_tokens, older.tokens_per_s) == (0, 5, None)  # a server without a disk cache


def test_a_stream_that_fails_or_runs_long_is_one_line():
    err = event({"type": "error", "error": {"type": "overloaded_error", "message": "shutting down"}})
    with pytest.raises(SpecmlxError, match="t3: the server's error: shutting down"):
        read_stream([(0.1, line) for line in err], REQUEST, 60)
    with pytest.raises(SpecmlxError, match="t3: a stream line that is not JSON: data: {oops"):
        read_stream([(0.1, "data: {oops")], REQUEST, 60)
    with pytest.raises(SpecmlxError, match="without its message_delta"):
        read_stream(stream({}, [[1]], [1.0], 2.0)[:-8], REQUEST, 60)
    with pytest.raises(SpecmlxError, match="took more than 60 s"):
        read_stream(stream({}, [[1]], [61.0], 62.0), REQUEST, 60)
    pings = [(0.1, line) for _ in range(500) for line in event({"type": "ping"})]  # a long prefill's keep-alives
    assert read_stream(pings + stream({}, [[1]], [1.0], 2.0), REQUEST, 60).tokens == (1,)
    endless = ((0.1, line) for _ in range(10_000) for line in event({"type": "content_block_delta", "delta": {}}))
    with pytest.raises(SpecmlxError, match="or 96 events"):
        read_stream(endless, REQUEST, 60)


# -- the report's arithmetic ------------------------------------------------------------------


def answer(step: str, first_s: float, prompt: int, cached: int, disk: int = 0, thread: str = MAIN,
           tokens: tuple[int, ...] = (1, 2, 3, 4, 5), rounds: int = 5, decode_s: float = 1.0) -> Answered:
    return Answered(step, thread, first_s + 2.0, first_s, first_s + decode_s, 1, tokens, prompt, cached, disk, rounds,
                    "")


def memory_run() -> Run:
    return Run("memory", ("--no-disk-cache",), (
        answer("t1", 70.0, 2800, 0), answer("s1", 72.0, 2900, 0, thread="sub"), answer("t2", 12.0, 3300, 2800),
        answer("t3", 150.0, 6000, 0)), restarts=(3,), restart_s=(20.0,))


def disk_run(t3_tokens=(1, 2, 3, 4, 5)) -> Run:
    return Run("disk", (), (
        answer("t1", 70.0, 2800, 0), answer("s1", 4.0, 2900, 2700, thread="sub"), answer("t2", 10.0, 3300, 2700),
        answer("t3", 6.0, 6000, 5800, disk=5800, tokens=t3_tokens, rounds=2)), restarts=(3,), restart_s=(21.0,))


def test_totals_add_up_the_session():
    t = totals(disk_run())
    assert (t["requests"], t["prompt"], t["memory"], t["disk"], t["prefilled"]) == (4, 15000, 5400, 5800, 3800)
    assert t["session_s"] == pytest.approx(70 + 4 + 10 + 6 + 4 * 2.0) and t["ttft_s"] == pytest.approx(90.0)
    assert t["tokens"] == 20 and t["restart_s"] == 21.0
    assert t["tokens_per_s"] == pytest.approx(16 / 4.0) and t["tokens_per_round"] == pytest.approx(20 / 17)


def test_the_restart_goal_compares_with_the_turn_before_and_a_cold_prefill():
    cold, disk = memory_run(), disk_run()
    goal = restart_goal(disk, cold)
    assert (goal["step"], goal["before_step"]) == ("t3", "t2")
    assert goal["vs_before"] == pytest.approx(6.0 / 10.0) and goal["vs_cold"] == pytest.approx(6.0 / 150.0)
    assert goal["cold_cached"] == 0
    own = restart_goal(cold, cold)  # the cold run is no yardstick of itself
    assert own["vs_before"] == pytest.approx(150.0 / 12.0) and own["vs_cold"] is None
    assert restart_goal(Run("x", (), disk.answers), cold) is None  # no restart


def test_the_subagent_and_the_parents_next_turn():
    (memory,), (disk,) = subagents(memory_run()), subagents(disk_run())
    assert (memory["step"], memory["prefilled"], memory["parent_step"], memory["parent_kept"]) == ("s1", 2900, "t2", True)
    assert (disk["prefilled"], disk["parent_cached"], disk["parent_before"], disk["parent_kept"]) == (200, 2700, 2800, False)


def test_answers_are_compared_turn_for_turn_with_the_first_configuration():
    runs = [memory_run(), disk_run(), disk_run(t3_tokens=(1, 2, 3, 4, 6))]
    runs[2] = Run("disk+lookup", (), runs[2].answers)
    assert agreement(runs) == {"disk": [], "disk+lookup": ["t3"]}
    shorter = Run("cut", (), memory_run().answers[:2])
    assert agreement([memory_run(), shorter]) == {"cut": ["t2", "t3"]}


def test_the_report_prints_every_table_and_goal():
    lookup = Run("disk+lookup", (), tuple(answer(a.step, a.first_s, a.prompt_tokens, a.cached_tokens, a.disk_tokens,
                                                 a.thread, rounds=2, decode_s=0.5) for a in disk_run().answers))
    runs = [memory_run(), disk_run(), lookup]
    text = report(runs)
    assert "| t3 | main | 6000 | 0 | 5800 | 200 | 6.00 | 4.00 | 2.50 |" in text
    assert "| restart | | | | | | 21.0 to listen | | |" in text
    assert "| total | | 15000 | 5400 | 5800 | 3800 | 90.00 | 4.00 | 1.18 |" in text
    assert "| x disk | answers as memory |" in text
    assert "| memory | 312.0 | 304.0 | 12200 | 2800 | 0 | 150.00 | 4.00 | 1.00 | 1.00 | - |" in text
    assert "| disk | 98.0 | 90.0 | 3800 | 5400 | 5800 | 6.00 | 4.00 | 1.18 | 1.00 | all |" in text
    assert "| disk+lookup | 98.0 | 90.0 | 3800 | 5400 | 5800 | - | 8.00 | 2.50 | 2.00 | all |" in text
    assert "disk: after the restart, t3's first token in 6.00 s: 0.60x t2's 10.00 s before it (goal <= 1.2x: met); " \
           "4.0% of a cold prefill (memory: 150.00 s; goal <= 10%: met)" in text
    assert "memory: after the restart, t3's first token in 150.00 s: 12.50x t2's 12.00 s before it (goal <= 1.2x: " \
           "missed)" in text
    assert "disk: subagent s1 prefilled 200 of 2900 prompt tokens (2700 cached); the parent's next turn t2 found " \
           "2700 of 3300 cached, its turn before was 2800: 100 lost" in text
    written = figures(runs)
    assert written["differ_from_first"] == {"disk": [], "disk+lookup": []} and written["runs"][1]["answers"][3]["disk_tokens"] == 5800
    json.dumps(written)


# -- the configurations and the loop ----------------------------------------------------------


def args(**given) -> argparse.Namespace:
    defaults = {"target": "T", "preset": None, "small_drafter": None, "disk_cache_gb": None, "settle": 0.0,
                "stop": "kill", "request_timeout": 5.0}
    return argparse.Namespace(**(defaults | given))


def test_each_configuration_has_its_server_flags(tmp_path):
    assert server_flags(CONFIGS["memory"], args(), True) == ["--target", "T", "--drafter", "none", "--no-disk-cache"]
    assert server_flags(CONFIGS["memory"], args(), False) == ["--target", "T", "--drafter", "none"]  # an older server
    assert server_flags(CONFIGS["disk+lookup"], args(disk_cache_gb=2.0, target=None, preset="P"), True) == \
        ["--preset", "P", "--drafter", "ngram", "--disk-cache-gb", "2.0"]
    assert server_flags(CONFIGS["disk+0.5b"], args(), True) == "no --small-drafter directory"
    assert "at " in server_flags(CONFIGS["disk+0.5b"], args(small_drafter=tmp_path / "nope"), True)
    assert server_flags(CONFIGS["disk+0.5b"], args(small_drafter=tmp_path), True)[-2:] == ["--drafter", str(tmp_path)]
    assert [c.name for c in configs_spec("disk, memory,disk")] == ["disk", "memory"]
    with pytest.raises(argparse.ArgumentTypeError, match="some of memory, disk"):
        configs_spec("memory,fast")


class StandIn:
    """A server's stand-in: counts starts and stops; `refuse`: the starts (1, 2...) that exit before listening."""

    def __init__(self, refuse: tuple[int, ...] = ()) -> None:
        self.calls: list[str] = []
        self.refuse = refuse

    def start(self) -> str:
        self.calls.append("start")
        if self.calls.count("start") in self.refuse:
            raise Refused("specmlx serve: error: no such drafter")
        return f"http://127.0.0.1:{len(self.calls)}"

    def stop(self, how: str) -> None:
        self.calls.append(how)


def test_the_loop_restarts_the_server_at_the_marker(monkeypatch, session):
    sent = []

    def send(url, request, timeout_s):
        sent.append((url, request.step))
        return answer(request.step, 1.0, 10, 0, thread=request.thread)

    monkeypatch.setattr(replay_module, "send", send)
    server, steps = StandIn(), plan(session, 4)
    run = replay_on(server, CONFIGS["disk"], ["--drafter", "none"], steps, args(stop="term"))
    at = next(i for i, s in enumerate(steps) if isinstance(s, Restart))
    assert server.calls == ["start", "term", "start"]
    assert [a.step for a in run.answers] == [s for _, s in sent] == [s.step for s in steps if isinstance(s, Request)]
    assert run.restarts == (at,) and len(run.restart_s) == 1
    assert {url for url, _ in sent[:at]} == {"http://127.0.0.1:1"} and {url for url, _ in sent[at:]} == \
        {"http://127.0.0.1:3"}


def test_stop_none_replays_the_session_without_its_restart(monkeypatch, session):
    """The yardstick of the turn after a restart: the same turn, its server never stopped."""
    monkeypatch.setattr(replay_module, "send", lambda url, request, timeout_s: answer(request.step, 1.0, 10, 0))
    server, steps = StandIn(), plan(session, 4)
    run = replay_on(server, CONFIGS["disk"], [], steps, args(stop="none"))
    assert server.calls == ["start"] and run.restarts == ()
    assert [a.step for a in run.answers] == [s.step for s in steps if isinstance(s, Request)]


def test_a_server_that_does_not_come_back_after_the_restart_is_an_error(monkeypatch, session):
    monkeypatch.setattr(replay_module, "send", lambda url, request, timeout_s: answer(request.step, 1.0, 10, 0))
    with pytest.raises(SpecmlxError, match="did not start again after the restart: specmlx serve: error") as caught:
        replay_on(StandIn(refuse=(2,)), CONFIGS["disk"], [], plan(session, 4), args())
    assert not isinstance(caught.value, Refused)  # not a configuration to skip


def test_a_refused_drafter_is_skipped_and_a_failed_turn_keeps_the_servers_output(monkeypatch, tmp_path, capsys):
    """disk+suffix on a server without the suffix drafter: one line, and the other configurations' report;
    a turn that fails: one line naming the server's output, kept, and the server stopped."""
    servers = []

    class Process(StandIn):
        def __init__(self, flags, cache_dir, log):
            super().__init__(refuse=(1,) if "suffix" in flags else ())
            self.log = log
            log.write_text("the server's last words")
            servers.append(self)

    monkeypatch.setattr(replay_module, "ServeProcess", Process)
    monkeypatch.setattr(replay_module, "serve_help", lambda: "--no-disk-cache")
    monkeypatch.setattr(replay_module, "send", lambda url, request, timeout_s: answer(request.step, 1.0, 10, 0))
    assert main(["--configs", "memory,disk+suffix", "--turns", "2", "--settle", "0"]) == 0
    captured = capsys.readouterr()
    assert "disk+suffix: skipped: the server refused it (specmlx serve: error: no such drafter)" in captured.err
    assert "| memory | " in captured.out and "disk+suffix |" not in captured.out
    assert [s.calls for s in servers] == [["start", "term"], ["start", "term"]]

    def fail(url, request, timeout_s):
        raise SpecmlxError(f"{request.step}: HTTP 500: boom")

    monkeypatch.setattr(replay_module, "send", fail)
    assert main(["--configs", "disk", "--turns", "2"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress lines
    kept = Path(re.search(r"\(the server's output: (\S+)\)$", last).group(1))
    assert last.startswith("specmlx bench serve replay: error: disk: t1: HTTP 500: boom")
    assert kept.read_text() == "the server's last words" and servers[-1].calls == ["start", "term"]
    kept.unlink()


def stand_in_process(tmp_path: Path, script: str) -> ServeProcess:
    """A ServeProcess whose command is a short script in place of `specmlx serve`."""
    server = ServeProcess(["--drafter", "none"], tmp_path / "cache", tmp_path / "serve.log")
    assert server.argv[-6:] == ["--drafter", "none", "--host", "127.0.0.1", "--port", "0"]
    server.argv = [sys.executable, "-c", script]
    return server


def test_the_server_process_is_found_listening_and_killed(tmp_path):
    import os
    import signal
    script = ("import os, time; print('specmlx serve: target'); "
              "print('listening on http://127.0.0.1:4321/v1 in', os.environ['SPECMLX_CACHE_DIR'], flush=True); "
              "time.sleep(60)")
    server = stand_in_process(tmp_path, script)
    assert server.start() == "http://127.0.0.1:4321"
    assert str(tmp_path / "cache") in server.log.read_text()
    server.stop("kill")
    assert server.proc.returncode == -signal.SIGKILL
    server.stop("kill")  # stopped already: nothing to do
    assert os.environ.get("SPECMLX_CACHE_DIR") != str(tmp_path / "cache")  # only the child's


def test_a_server_that_exits_before_listening_is_refused_with_its_last_line(tmp_path):
    script = "import sys; print('loading...'); print('specmlx serve: error: unknown drafter suffix'); sys.exit(2)"
    with pytest.raises(Refused, match="^specmlx serve: error: unknown drafter suffix$"):
        stand_in_process(tmp_path, script).start()


def test_bad_arguments_are_one_line_before_any_server(capsys, tmp_path):
    assert main(["--turns", "0"]) == 2
    assert capsys.readouterr().err.strip() == "specmlx bench serve replay: error: --turns must be >= 1, got 0"
    assert main(["--session", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("specmlx bench serve replay: error: cannot read the session") and "\n" not in err


def test_the_session_ships_beside_the_replay():
    assert SESSION_PATH.is_file() and SESSION_PATH.parent == Path(replay_module.__file__).parent
