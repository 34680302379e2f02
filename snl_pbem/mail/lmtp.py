"""An LMTP (or SMTP) receiver for an MTA that delivers the game address to us (aiosmtpd).

Like Mailman's ``runners/lmtp.py``: check the envelope, store, answer. The
reply codes live in one table:

- ``550`` for a recipient that is not the game address;
- ``552`` for a message over the size cap (aiosmtpd's own check, before storing);
- ``451`` when the message could not be stored (database busy): the MTA retries;
- ``421`` to a session closed to make room for a new one, or idle too long
  (snl_pbem.mail.sessions, which bounds the sessions);
- ``250`` only once the message is committed to the database.

``deliver`` is the service layer's ``ingest``; this module knows nothing of games.

At start-up the receiver asks the MTA for what it queued while snl-pbem was down
(``ReceiverController.redeliver``: ETRN, snl_pbem.mail.etrn) and says when that has been
delivered, so that rounds waiting on it need not wait for the MTA's next retry.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import socket
import threading
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from snl_pbem.mail.etrn import FIX, EtrnRefused, ask_to_deliver
from snl_pbem.mail.sessions import (
    IDLE_TIMEOUT,
    MAX_SESSIONS,
    GuardedLMTP,
    GuardedSMTP,
    Listener,
    Sessions,
    Throttle,
    ThrottleFilter,
    listening_sockets,
    session_limit,
)
from snl_pbem.rules.words import counted

log = logging.getLogger("snl_pbem.lmtp")

STATUS = {
    "stored": "250 2.0.0 Stored",
    "recipient_ok": "250 2.1.5 OK",
    "not_here": "550 5.1.1 <{address}>: not the game address; nothing is delivered here",
    "temporary": "451 4.3.0 Temporary failure storing the message; please try again later",
    "error": "500 5.5.0 Error: {name}",
}

T = TypeVar("T")

STORE_THREADS = 32
"""Threads that run a handler's ``deliver`` (the receiver's loop's executor), one for each
message being stored, so that as many sessions as an MTA opens at once (Postfix: 20 to one
destination) each have one. asyncio's own default, on two cores, is six
(``min(32, cores + 4)``): a seventh session's message waited for a thread. A thread is made
only when none is free. The server's receiver uses none: it ``submit``s each message to
one writer thread (``snl_pbem.runners.mailboxes.GroupStore``)."""

Deliver = Callable[[bytes, str], object]
"""Store (and process) one raw message; raises if it could not be stored."""
Submit = Callable[[bytes, str, Callable[[object], object]], None]
"""Have one raw message stored without waiting: the callable given is called, from any
thread, once it is (with an exception if it could not be)."""


class _Settler:
    """Outcomes that come from another thread, set on their futures in the loop: one
    wake-up of the loop for all that come together (a group committed at once), not one
    each."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._due: list[tuple[asyncio.Future[object], object]] = []

    def settle(self, future: asyncio.Future[object], outcome: object) -> None:
        with self._lock:
            self._due.append((future, outcome))
            if len(self._due) > 1:
                return  # the loop is asked already, and not yet served
        try:
            self.loop.call_soon_threadsafe(self._set)
        except RuntimeError:  # the loop is closed: no session waits any more
            with self._lock:
                self._due.clear()

    def _set(self) -> None:
        with self._lock:
            due, self._due = self._due, []
        for future, outcome in due:
            if future.done():  # cancelled: its session went away meanwhile
                continue
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)


class GameAddressHandler:
    """aiosmtpd handler: accepts mail for the game address only, stores it, then says 250."""

    def __init__(
        self,
        address: str,
        deliver: Deliver | None = None,
        *,
        lmtp: bool = True,
        submit: Submit | None = None,
    ) -> None:
        """``deliver`` is called in the loop's executor for each message; ``submit``
        instead, when given, in the loop, and the session waits for its word."""
        if (deliver is None) == (submit is None):
            raise ValueError("give either deliver or submit")
        self.address = address.lower()
        self.deliver = deliver
        self.submit = submit
        self.lmtp = lmtp
        self._settler: _Settler | None = None
        self.throttle = Throttle(log)
        self.not_stored = 0
        """Messages answered 451 (not stored: the MTA keeps them and retries later)."""

    async def handle_EHLO(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        hostname: str,
        responses: list[str],
    ) -> list[str]:
        """LHLO's reply (EHLO's, over SMTP): aiosmtpd's, naming PIPELINING too (RFC 2920).
        aiosmtpd reads a session's commands in order from what has arrived, whether or not
        the client waited for each reply; told so, an MTA sends MAIL, RCPT and DATA
        together (Postfix's LMTP client, smtp(8), does when the reply names it): two round
        trips a message instead of four."""
        session.host_name = hostname  # (aiosmtpd sets it itself only without this hook)
        return [*responses[:-1], "250-PIPELINING", responses[-1]]

    async def handle_RCPT(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        if address.strip("<>").lower() != self.address:
            self.throttle(logging.INFO, "rcpt", f"refused recipient {address} from {session.peer}")
            return STATUS["not_here"].format(address=address)
        envelope.rcpt_tos.append(address)
        return STATUS["recipient_ok"]

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        raw = envelope.original_content or b""
        peer = session.peer[0] if isinstance(session.peer, tuple) else str(session.peer)
        # LMTP (RFC 2033 §4.2): one reply per accepted recipient.
        replies = max(1, len(envelope.rcpt_tos)) if self.lmtp else 1
        guarded = server if isinstance(server, GuardedSMTP) else None
        if guarded is not None:
            guarded.begin_store()
        try:
            await self._stored(raw, f"lmtp:{peer}")
        except Exception as exc:
            log.error("could not store a message from %s: %s: %s", peer, type(exc).__name__, exc)
            self.not_stored += 1
            return "\r\n".join([STATUS["temporary"]] * replies)
        finally:
            if guarded is not None:
                guarded.end_store()
        return "\r\n".join([STATUS["stored"]] * replies)

    def _stored(self, raw: bytes, source: str) -> Awaitable[object]:
        """Done once the message is stored (raises if it could not be)."""
        loop = asyncio.get_running_loop()
        if self.submit is None:
            assert self.deliver is not None
            return loop.run_in_executor(None, self.deliver, raw, source)
        if self._settler is None or self._settler.loop is not loop:
            self._settler = _Settler(loop)
        future: asyncio.Future[object] = loop.create_future()
        self.submit(raw, source, partial(self._settler.settle, future))
        return future

    async def handle_exception(self, error: Exception) -> str:
        """aiosmtpd logs a traceback per failing command otherwise: once per interval here."""
        name = type(error).__name__
        self.throttle(logging.ERROR, f"exc:{name}", f"LMTP session error: {name}", exc_info=error)
        return STATUS["error"].format(name=name)


class ReceiverController(Controller):
    """Runs the receiver in its own thread and event loop (aiosmtpd's Controller), with
    bounded sessions (``max_sessions``) and an idle timeout (``idle_timeout`` seconds)."""

    def __init__(
        self,
        handler: GameAddressHandler,
        host: str,
        port: int,
        *,
        max_size: int,
        lmtp: bool = True,
        max_sessions: int = MAX_SESSIONS,
        idle_timeout: float = IDLE_TIMEOUT,
        **kwargs: Any,
    ) -> None:
        self.max_size = max_size
        self.use_lmtp = lmtp
        self.idle_timeout = idle_timeout
        super().__init__(handler, hostname=host, port=port, **kwargs)
        throttle = Throttle(log)
        limit = session_limit(max_sessions)
        if limit < max_sessions:
            log.warning(
                "LMTP: at most %d sessions, not %d: half the process's file handles",
                limit,
                max_sessions,
            )
        self.sessions = Sessions(limit, throttle)
        self._redelivery: concurrent.futures.Future[None] | None = None
        self.fqdn = socket.getfqdn()  # once: aiosmtpd would look it up for every connection
        self.loop.set_exception_handler(self._loop_error)
        self.loop.set_default_executor(  # (shut down with the loop, as asyncio's own)
            concurrent.futures.ThreadPoolExecutor(STORE_THREADS, "snl-pbem-lmtp-store")
        )
        aiosmtpd_log = logging.getLogger("mail.log")
        if not any(isinstance(f, ThrottleFilter) for f in aiosmtpd_log.filters):
            aiosmtpd_log.addFilter(ThrottleFilter())

    def factory(self) -> SMTP:
        server_class = GuardedLMTP if self.use_lmtp else GuardedSMTP
        return server_class(
            self.handler,
            sessions=self.sessions,
            data_size_limit=self.max_size,
            enable_SMTPUTF8=True,
            decode_data=False,
            hostname=self.fqdn,
            ident="snl-pbem",
            timeout=self.idle_timeout,
        )

    def redeliver(
        self,
        server: tuple[str, int],
        domains: Sequence[str],
        settle: float,
        then: Callable[[], None],
    ) -> concurrent.futures.Future[None]:
        """Ask the MTA at ``server`` (ETRN) to deliver now what it queued for ``domains``,
        then call ``then`` (in a worker thread) once it has: no delivery started or under
        way for ``settle`` seconds. If it cannot be asked or says no, or a message could
        not be stored meanwhile (the MTA keeps it for its next retry), say so once and do
        not call ``then``. Call after ``start``; the future is done when all is said."""
        self._redelivery = asyncio.run_coroutine_threadsafe(
            self._redeliver(server, list(domains), settle, then), self.loop
        )
        return self._redelivery

    async def _redeliver(
        self,
        server: tuple[str, int],
        domains: list[str],
        settle: float,
        then: Callable[[], None],
    ) -> None:
        failed_before = self.handler.not_stored
        try:
            await in_daemon_thread(partial(ask_to_deliver, server, domains, self.fqdn))
        except EtrnRefused as exc:
            log.warning(
                "LMTP: could not have the MTA deliver what it queued while snl-pbem was "
                "down (%s): it comes at the MTA's next retry, and rounds past their deadline "
                "wait up to redelivery_grace. %s",
                exc,
                FIX,
            )
            return
        log.info("LMTP: asked the MTA (ETRN %s) to deliver what it queued", " ".join(domains))
        await self.sessions.quiet(settle)
        if self.handler.not_stored > failed_before:
            log.warning(
                "LMTP: %s redelivered after start-up could not be stored (451): "
                "the MTA retries them later",
                counted(self.handler.not_stored - failed_before, "message"),
            )
            return
        log.info("LMTP: the MTA's queue is delivered (nothing for %g s)", settle)
        try:
            await in_daemon_thread(then)
        except Exception as exc:
            log.error("after the MTA's redelivery: %s: %s", type(exc).__name__, exc)

    def stop(self, no_assert: bool = False) -> None:
        if self._redelivery is not None:
            self._redelivery.cancel()  # thread-safe: cancels the task in the loop
            self._redelivery = None
        super().stop(no_assert)

    def _create_server(self) -> Awaitable[asyncio.AbstractServer]:
        return self._listen()

    async def _listen(self) -> asyncio.AbstractServer:
        sockets = listening_sockets(self.hostname, self.port)
        return Listener(self.loop, sockets, self._factory_invoker, self.sessions)

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """Whatever else asyncio reports from this loop: once per kind per interval."""
        exc = context.get("exception")
        message = str(context.get("message", "error"))
        kind = type(exc).__name__ if exc is not None else ""
        self.sessions.throttle(
            logging.ERROR,
            f"loop:{message}:{kind}",
            f"LMTP: {message}: {kind} {exc or ''}".strip(),
            exc_info=exc,
        )


async def in_daemon_thread(func: Callable[[], T]) -> T:
    """``func()`` in a thread of its own, a daemon: the ETRN, waiting on a hung MTA, never
    delays the process's exit (the loop's executor threads are joined at exit)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(set_outcome: Callable[[Any], object], outcome: object) -> None:
        def apply() -> None:
            if not future.done():  # not cancelled meanwhile (stop)
                set_outcome(outcome)

        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(apply)

    def run() -> None:
        try:
            result = func()
        except BaseException as exc:
            settle(future.set_exception, exc)
        else:
            settle(future.set_result, result)

    threading.Thread(target=run, name="lmtp-etrn", daemon=True).start()
    return await future
