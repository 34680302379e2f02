"""A sandbox worker's answers on its pipe (``snl_pbem.mail.sandbox._answer`` and
``_Answers``): each answer whole and in order, however the bytes are split over reads;
nothing taken before all of it has come; a pipe closed part way is the worker gone."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import threading
from collections.abc import Iterator

import pytest

from snl_pbem.mail import sandbox
from snl_pbem.mail.sandbox import _FRAME, _READ_BYTES, _answer, _Answers

WAIT = 30.0
"""Seconds to wait for bytes already written (they are there at once)."""


@pytest.fixture
def pipe() -> Iterator[tuple[multiprocessing.connection.Connection, ...]]:
    server, worker = multiprocessing.Pipe()
    yield server, worker
    server.close()
    worker.close()


def test_answers_come_whole_and_in_order_however_many_one_read_holds(pipe) -> None:
    """Small answers (many in one read), one larger than a read (several reads), and
    small ones after it: each as sent, in order, and nothing left over."""
    server, worker = pipe
    big = ("ok", b"x" * (_READ_BYTES * 2 + 17))
    sent = [("ok", i) for i in range(50)] + [big] + [("error", f"e{i}") for i in range(5)]
    writer = threading.Thread(target=lambda: [_answer(worker, a) for a in sent])
    writer.start()  # (a thread: the big answer fills the pipe until it is read)
    answers = _Answers(server)
    got = [answers.next(WAIT) for _ in sent]
    writer.join()
    assert got == sent
    assert answers.empty()


def test_an_answer_part_written_is_not_taken_until_the_rest_comes(pipe) -> None:
    """The length and half the answer written: no answer yet (the wait runs out), and the
    answer once the rest is written. A frame ahead of it already whole is taken first."""
    server, worker = pipe
    payload = pickle.dumps(("ok", "the second"), protocol=pickle.HIGHEST_PROTOCOL)
    frame = _FRAME.pack(len(payload)) + payload
    _answer(worker, ("ok", "the first"))
    os.write(worker.fileno(), frame[:5])  # (not even the whole length)
    answers = _Answers(server)
    assert answers.next(WAIT) == ("ok", "the first")
    assert answers.next(0.05) is None
    os.write(worker.fileno(), frame[5 : len(frame) // 2])
    assert answers.next(0.05) is None
    assert not answers.empty()
    os.write(worker.fileno(), frame[len(frame) // 2 :])
    assert answers.next(WAIT) == ("ok", "the second")
    assert answers.empty()


def test_a_second_answer_sent_early_waits_for_its_turn(pipe) -> None:
    """Two answers in one read: the first is taken, the second stays (``empty`` is false:
    the sandbox does not put such a worker back), and is the next taken."""
    server, worker = pipe
    _answer(worker, ("ok", 1))
    _answer(worker, ("ok", 2))
    answers = _Answers(server)
    assert answers.next(WAIT) == ("ok", 1)
    assert not answers.empty()
    assert answers.next(0) == ("ok", 2)
    assert answers.empty()


@pytest.mark.parametrize("cut", [0, 3, 8, 12])
def test_a_pipe_closed_part_way_is_the_worker_gone(pipe, cut: int) -> None:
    """Closed before an answer, inside its length or inside the answer: EOFError."""
    server, worker = pipe
    payload = pickle.dumps(("ok", "never whole"), protocol=pickle.HIGHEST_PROTOCOL)
    os.write(worker.fileno(), (_FRAME.pack(len(payload)) + payload)[:cut])
    worker.close()
    with pytest.raises(EOFError):
        _Answers(server).next(WAIT)


def test_the_nap_is_slept_only_when_no_answer_is_here(pipe, monkeypatch) -> None:
    """An answer already read is taken without sleeping; the nap comes before waiting on
    the pipe, and the wait runs out as before."""
    server, worker = pipe
    naps: list[float] = []
    monkeypatch.setattr(sandbox.time, "sleep", naps.append)
    _answer(worker, ("ok", 1))
    _answer(worker, ("ok", 2))
    answers = _Answers(server)
    assert answers.next(WAIT, 0.5) == ("ok", 1)  # (read from the pipe after the nap)
    assert answers.next(WAIT, 0.5) == ("ok", 2)  # here already: no nap
    assert naps == [0.5]
    assert answers.next(0.01, 0.5) is None
    assert naps == [0.5, 0.5]


def test_an_answer_that_trickles_in_is_still_timed_out(pipe) -> None:
    """The time limit counts from the call, not from the last bytes: a worker writing an
    answer a byte at a time (ten megabytes: never done) is given up on. Bounded by
    events: the writer stops once the call has returned, or after a minute."""
    server, worker = pipe
    returned = threading.Event()
    payload = pickle.dumps(("ok", "x" * 10_000_000), protocol=pickle.HIGHEST_PROTOCOL)
    frame = _FRAME.pack(len(payload)) + payload

    def trickle() -> None:
        for byte in frame[:-1]:
            if returned.wait(0.01):
                return
            os.write(worker.fileno(), bytes([byte]))

    writer = threading.Thread(target=trickle, daemon=True)
    writer.start()
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(_Answers(server).next(0.2)), daemon=True)
    reader.start()
    reader.join(60)
    returned.set()
    writer.join()
    assert got == [None]


def test_a_negative_time_limit_waits_no_more_than_none(pipe) -> None:
    """As ``Connection.poll``: no answer here, none waited for (poll would wait for good)."""
    server, _worker = pipe
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(_Answers(server).next(-1)), daemon=True)
    reader.start()
    reader.join(60)
    assert got == [None]


def test_answers_closed_read_nothing_more(pipe) -> None:
    """Once closed (its worker killed, from any thread), nothing is read from the number
    its pipe had: another descriptor may have it by then."""
    server, worker = pipe
    answers = _Answers(server)
    _answer(worker, ("ok", 1))
    answers.close()
    with pytest.raises(OSError, match="closed"):
        answers.next(WAIT)


def test_a_batch_read_across_many_reads_keeps_its_order() -> None:
    """A real worker's answers to a batch of 300, of growing sizes, over several of the
    worker's batches: each message's own reading, in the order sent."""
    box = sandbox.Sandbox()
    raws = [
        f"From: p{i}@example.org\r\nSubject: s{i}\r\n\r\nDICE {1 + i % 6}\r\n".encode()
        + b"x" * (i * 37)
        for i in range(300)
    ]
    try:
        read = box.parse_many(raws, "snl@example.org", [()] * len(raws))
    finally:
        box.close()
    assert [m.subject for m in read] == [f"s{i}" for i in range(300)]  # type: ignore[union-attr]


def test_a_worker_given_a_descriptor_past_1023_is_still_heard(pipe) -> None:
    """A server with many connections open may give a worker's pipe a descriptor that
    ``select`` refuses (past 1023): its answers are waited for all the same."""
    import fcntl
    import resource
    from multiprocessing.connection import Connection

    server, worker = pipe
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.skip(f"descriptors are limited to {hard} here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1100), hard))
    try:
        high = Connection(fcntl.fcntl(server.fileno(), fcntl.F_DUPFD, 1090))  # (a free one)
        try:
            _answer(worker, ("ok", "heard"))
            assert _Answers(high).next(WAIT) == ("ok", "heard")
        finally:
            high.close()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_batch_naps_only_between_its_answers(monkeypatch) -> None:
    """No nap before a batch's first answer (nor for a message read alone), the nap
    before each later one: what a batch adds to its reading is bounded by its answers."""
    asked: list[float] = []
    real = _Answers.next

    def next_answer(self: _Answers, seconds: float, nap: float = 0.0) -> object:
        asked.append(nap)
        return real(self, seconds, nap)

    monkeypatch.setattr(_Answers, "next", next_answer)
    box = sandbox.Sandbox()
    raws = [f"From: p{i}@example.org\r\n\r\nDICE {i}\r\n".encode() for i in range(1, 4)]
    try:
        box.warm(1)
        asked.clear()  # (the worker's start)
        box.parse_many(raws, "snl@example.org", [()] * 3)
        assert asked == [0.0, sandbox.DRAIN_NAP, sandbox.DRAIN_NAP]
        asked.clear()
        box.parse(raws[0], "snl@example.org")
        assert asked == [0.0]
    finally:
        box.close()
