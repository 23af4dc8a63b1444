"""The worker's ledger without a model: what a queue refuses, and what a ticket's client hears as it ends."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specmlx.errors import SpecmlxError
from specmlx.serve.errors import APIError
from specmlx.serve.ledger import Ledger, failure
from specmlx.serve.jobs import Done, Failed

STOPPING = APIError(503, "stopping", "server_shutdown")


def done(finish: str, tokens: int = 3) -> Done:
    return Done(SimpleNamespace(generation_tokens=tokens, finish_reason=finish), "", 0, 0.0)  # what the ledger reads


def ticket(ledger: Ledger):
    heard: list = []
    return ledger.admit(None, heard.append), heard


def test_a_full_queue_is_refused_with_retry_after_and_a_closed_one_with_the_reason():
    ledger = Ledger(max_queue=1)
    ticket(ledger)
    with pytest.raises(APIError) as full:
        ticket(ledger)
    assert full.value.status == 429 and full.value.headers == {"Retry-After": "1"}
    ledger.dequeued()
    [live] = ledger.close(STOPPING)
    assert ledger.live() == [live]
    with pytest.raises(APIError) as closed:
        ticket(ledger)
    assert closed.value is STOPPING


@pytest.mark.parametrize("finish, why, heard", [
    ("length", None, "done"), ("length", STOPPING, "done"),  # whole, though the server began stopping
    ("cancelled", None, None), ("cancelled", STOPPING, "stopping"), (None, STOPPING, "stopping")])
def test_an_ended_ticket_tells_its_client_the_answer_or_why_it_was_stopped(finish, why, heard):
    ledger = Ledger()
    one, items = ticket(ledger)
    if why is not None or finish in ("cancelled", None):
        one.cancel(why)
    ledger.end(one, one.submitted, None if finish is None else done(finish))
    expected = {"done": [done(finish)] if finish else [], "stopping": [Failed(STOPPING)], None: []}[heard]
    assert items == expected and not ledger.live()
    [record] = ledger.records
    assert record.finish_reason == (finish or "cancelled")
    assert record.generation_tokens == (3 if finish else 0)


def test_a_failure_is_the_clients_input_or_a_bug_and_is_told_once(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECMLX_DATA_DIR", str(tmp_path))
    assert (failure(SpecmlxError("bad prompt")).status, failure(SpecmlxError("x")).code) == (400, "invalid_request")
    bug = failure(RuntimeError("a bug"))
    assert (bug.status, bug.code) == (500, "internal_error") and "RuntimeError" in bug.message
    assert "RuntimeError: a bug" in (tmp_path / "specmlx.log").read_text()
    ledger = Ledger()
    (one, heard), (two, told) = ticket(ledger), ticket(ledger)
    ledger.fail(one, one.submitted, SpecmlxError("bad prompt"))
    ledger.fail(two, two.submitted, RuntimeError("lost"), told=True)  # its client heard already (the mirror lost)
    assert [type(item) for item in heard] == [Failed] and told == []
    assert [r.finish_reason for r in ledger.records] == ["error", "error"] and not ledger.live()
