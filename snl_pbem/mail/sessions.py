"""Bounded sessions for the LMTP receiver (snl_pbem.mail.lmtp), so that whoever can
connect cannot keep the MTA out.

The review of issue 20 held 1,100 idle half-open sessions: they used up the process's
1,024 file handles, a real delivery timed out and was never stored, and asyncio logged
110,846 tracebacks (47 MB) in 35 s. Here:

- :class:`Sessions` caps the open sessions and, at the cap, closes the idlest to serve
  a new connection (why that keeps the MTA's delivery in, there);
- :class:`GuardedSMTP` closes a session silent for aiosmtpd's ``timeout`` (our
  ``idle_timeout``) and never waits on a peer that does not read;
- :class:`Listener` accepts connections in place of ``loop.create_server``, whose
  accept loop, out of handles, logs a traceback per connection waiting;
- :class:`Throttle` logs each kind of failure once per interval, with a count.

:meth:`Sessions.quiet` tells when the MTA has stopped delivering (the start-up
redelivery, snl_pbem.mail.etrn).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import re
import resource
import socket
import time
from collections.abc import Callable
from email._header_value_parser import get_addr_spec, get_angle_addr
from email.errors import HeaderParseError
from typing import Any, AnyStr

import aiosmtpd
from aiosmtpd.lmtp import LMTP
from aiosmtpd.smtp import MISSING, SMTP, syntax

from snl_pbem.mail.addrspec import ATOM
from snl_pbem.mail.smtpdata import Refused, read_data
from snl_pbem.rules.words import counted

_AIOSMTPD_1_4 = aiosmtpd.__version__.startswith("1.4.")
"""The aiosmtpd whose reading of a command's address ``GuardedSMTP._getaddr`` repeats."""

_PLAIN_ANGLE_ADDR = re.compile(rf"<({ATOM}(?:\.{ATOM})*@{ATOM}(?:\.{ATOM})*)>")
"""A command's address as nearly every MTA writes it: ``<local@domain>``, each a dot-atom
of ASCII atext (RFC 5322 §3.2.3), nothing else inside the brackets, and no ``=?`` in it
(a local part or domain starting with ``=?`` aiosmtpd decodes as an RFC 2047 encoded word:
``<=?us-ascii?q?ann?=@example.org>`` is ann@example.org; any ``=?`` is left to its
reading). Its reading (``email._header_value_parser``) gives such an address back as
written, and took 45 us a command, 28-31% of the time of the receiver's event loop's
thread (py-spy, issue 23): ``GuardedSMTP._getaddr`` reads these here (under 1 us), any
other with the parser."""

CLOSING = {
    "busy": "421 4.3.2 {host} Too many connections; closing this one, please try again",
    "idle": "421 4.4.2 {host} Idle too long; closing the connection",
}
"""What a session is told as it is closed (RFC 5321 §3.8: 421, then close)."""

MAX_SESSIONS = 100
"""Open sessions at most, by default. Postfix opens at most 20 to one destination
(``default_destination_concurrency_limit``), so 100 leaves room for a second MTA."""
IDLE_TIMEOUT = 300.0
"""Seconds a session may wait for the client, by default: RFC 5321 §4.5.3.2.7 asks a
server to wait at least 5 minutes for the next command (the client's own limits, 5
minutes for the greeting, MAIL and RCPT replies, 2 for DATA, 3 per data block and 10
for the end of data, bound how long it waits for us)."""
LOG_INTERVAL = 60.0
"""A repeated warning (accept failures, sessions closed) is logged once per interval."""
ACCEPT_BATCH = 32
"""Connections accepted per turn of the event loop, so that sessions keep being served."""
RESOURCE_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class Throttle:
    """Logs each kind of event at most once per ``interval``, saying how many were left
    unlogged: a flood of failures (every accept of a flood of connections fails alike)
    is a few lines, never one per event."""

    def __init__(self, logger: logging.Logger, interval: float = LOG_INTERVAL) -> None:
        self.logger = logger
        self.interval = interval
        self._last: dict[str, float] = {}
        self._unlogged: dict[str, int] = {}

    def __call__(self, level: int, key: str, message: str, *, exc_info: Any = None) -> None:
        now = time.monotonic()
        last = self._last.get(key, now - self.interval)
        if now - last < self.interval:
            self._unlogged[key] = self._unlogged.get(key, 0) + 1
            return
        unlogged = self._unlogged.pop(key, 0)
        if unlogged:
            message += f" ({unlogged} more like it in the last {now - last:.0f} s)"
        self._last[key] = now
        self.logger.log(level, "%s", message, exc_info=exc_info)


class ThrottleFilter(logging.Filter):
    """For aiosmtpd's own logger (``mail.log``), which logs per session and per bad
    command: each message format at most once per interval."""

    def __init__(self, interval: float = LOG_INTERVAL) -> None:
        super().__init__()
        self.interval = interval
        self._last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        key = f"{record.levelno}:{record.msg}"
        if now - self._last.get(key, -self.interval) < self.interval:
            return False
        self._last[key] = now
        return True


class Sessions:
    """The open sessions, least recent progress first; touched in the loop's thread only.

    Progress is any byte received and any command answered 2xx or 3xx (LHLO, MAIL,
    RCPT, DATA, RSET, NOOP...). At the cap, a new connection is always served: a session
    that has never had a command accepted goes first, the one that connected longest ago
    (a connect flood sheds its own), and only when there is none the session that has
    gone longest without progress; never one whose message is being stored right now.
    The MTA's session has spoken by its first command, so a flood of bare connections,
    however large, only closes its own oldest ones, even while the MTA sits between two
    commands or keeps an idle session cached; to close it an attacker would have to hold
    ``limit`` sessions that have all spoken and each progressed since the MTA's last
    command or byte. Only when every session is storing a message is the new one told
    ``421`` (the MTA tries again): only deliveries can fill the cap.
    """

    def __init__(self, limit: int, throttle: Throttle) -> None:
        self.limit = limit
        self.throttle = throttle
        self._order: dict[GuardedSMTP, None] = {}
        self.moved = time.monotonic()
        """When a session last connected or progressed (``time.monotonic()``)."""

    def __len__(self) -> int:
        return len(self._order)

    def admit(self, session: GuardedSMTP) -> bool:
        """Make room for ``session`` if need be; False if there is none to make."""
        while len(self._order) >= self.limit:
            if not self.shed(1):
                return False
        self._order[session] = None
        self.moved = time.monotonic()
        return True

    def shed(self, count: int) -> int:
        """Close up to ``count`` sessions, those that never had a command accepted first,
        then the least recent progress; never one whose message is being stored; how
        many were closed."""
        idle = [s for s in self._order if not s.storing]
        victims = ([s for s in idle if not s.spoken] + [s for s in idle if s.spoken])[:count]
        for victim in victims:
            self.drop(victim)
            victim.close_with("busy")
        if victims:
            self.throttle(
                logging.WARNING,
                "shed",
                f"LMTP: closed {counted(len(victims), 'idle session')} to make room for new "
                f"connections ({len(self._order)} open, at most {self.limit})",
            )
        return len(victims)

    def progressed(self, session: GuardedSMTP) -> None:
        if session in self._order:
            del self._order[session]
            self._order[session] = None
            self.moved = time.monotonic()

    async def quiet(self, settle: float) -> None:
        """Return once no session has connected or progressed for ``settle`` seconds,
        counted from now at the earliest, and none is in the middle of a message (between
        its MAIL and the reply to its data): the MTA has delivered what it had for us."""
        self.moved = max(self.moved, time.monotonic())
        while True:
            left = self.moved + settle - time.monotonic()
            if left <= 0 and not any(s.delivering for s in self._order):
                return
            await asyncio.sleep(max(left, min(settle, 1.0)))

    def drop(self, session: GuardedSMTP) -> None:
        self._order.pop(session, None)

    def close_all(self) -> None:
        for session in list(self._order):
            self.drop(session)
            session.abort()


class GuardedSMTP(SMTP):
    """aiosmtpd's session, counted in :class:`Sessions`, closed without waiting on a
    client that does not read (``abort``: a ``close`` would wait to flush our replies to
    a half-open peer, and keep its file handle)."""

    def __init__(self, handler: Any, *, sessions: Sessions, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self.sessions = sessions
        self.storing = False
        self.spoken = False
        """A command of this session was accepted (answered 2xx or 3xx): an SMTP client,
        not a bare connection; shed after those (see :class:`Sessions`)."""
        self._admitted = False
        self._greeted = False
        self._held: list[bytes] = []
        """Replies written with the next one (``push``)."""
        self._held_size = 0
        self._idle_until = 0.0
        """When the session times out unless it hears from the client (loop time)."""
        self._timer_pending = False
        """``_timeout_handle`` is still to fire (``_reset_timeout``)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self._admitted:  # STARTTLS makes a connection anew: the same session
            return
        self._admitted = True
        if not self.sessions.admit(self):
            self.close_with("busy")

    def _getaddr(self, arg: str) -> tuple[str | None, str | None]:
        """The address of a MAIL or RCPT command and what follows it, as aiosmtpd's own
        reads them (1.4; ``tests/mail/test_lmtp_sessions.py`` holds them to it), without
        the class it defines at each call for its type checker: a tenth of the LMTP
        receiver's time was making that class, twice a message; a plain ``<local@domain>``
        (``_PLAIN_ANGLE_ADDR``) is read without the parser at all. Another aiosmtpd than
        1.4 reads them its own way."""
        if not _AIOSMTPD_1_4:
            return super()._getaddr(arg)
        if not arg:
            return "", ""
        addr: str | None = None
        plain = _PLAIN_ANGLE_ADDR.match(arg)
        if plain is not None and "=?" not in plain.group(1):  # as nearly every MTA writes it
            rest = arg[plain.end() :]
            if rest[:1] in (" ", "\t"):
                rest = rest.lstrip()  # (their CFWS after the ">": any whitespace)
            if not rest.startswith("("):  # (a comment: theirs reads it, below)
                addr = plain.group(1)
        if addr is None:
            address: Any
            try:
                if arg.lstrip().startswith("<"):
                    address, rest = get_angle_addr(arg)
                else:
                    address, rest = get_addr_spec(arg)
            except HeaderParseError:
                return None, None
            addr = address.addr_spec
        if self.local_part_limit and len(addr.rpartition("@")[0]) > self.local_part_limit:
            return None, None
        return addr, rest

    @syntax("DATA")
    async def smtp_DATA(self, arg: str) -> None:
        """aiosmtpd's (1.4), its data read in pieces, not a line at a time
        (``snl_pbem.mail.smtpdata``): the same replies, the same bytes to the handler.
        Another aiosmtpd, or one that decodes the data, reads it its own way."""
        if not _AIOSMTPD_1_4 or self._decode_data or "DATA" not in self._handle_hooks:
            await super().smtp_DATA(arg)
            return
        if await self.check_helo_needed() or await self.check_auth_needed("DATA"):
            return
        assert self.envelope is not None
        if not self.envelope.rcpt_tos:
            await self.push("503 Error: need RCPT command")
            return
        if arg:
            await self.push("501 Syntax: DATA")
            return
        await self.push("354 End data with <CR><LF>.<CR><LF>")
        try:
            read = await read_data(self._reader, self.data_size_limit, self.line_length_limit)
        except asyncio.CancelledError:  # the connection was lost (as aiosmtpd says it)
            logging.getLogger("mail.log").info("Connection lost during DATA")
            self._writer.close()
            raise
        if read is None:  # the stream ended, which cancels this session
            return
        data, refused = read
        if refused is not None:
            too_long = refused is Refused.TOO_LONG
            await self.push(
                "500 Line too long (see RFC5321 4.5.3.1.6)"
                if too_long
                else "552 Error: Too much mail data"
            )
            self._set_post_data_state()  # type: ignore[no-untyped-call]
            return
        self.envelope.content = self.envelope.original_content = data
        status = await self._call_handler_hook("DATA")
        self._set_post_data_state()  # type: ignore[no-untyped-call]
        await self.push("250 OK" if status is MISSING else status)

    def data_received(self, data: bytes) -> None:
        """Bytes from the client are progress: a long DATA is not idle."""
        super().data_received(data)
        self.sessions.progressed(self)

    async def push(self, status: AnyStr) -> None:
        """A reply; after the greeting, a 2xx or 3xx one accepts a command: progress, and
        the session has spoken.

        Replies to commands a client sent together (PIPELINING, RFC 2920 §3.2 lets a
        server send them together) go out in one write, as Postfix's smtpd writes them:
        a reply held back (``_held_back``) waits for the next one that is not. Each write
        wakes the client and was a third of the receiver's loop's time; a pipelined
        message (MAIL, RCPT, DATA, its data) had four replies, written now in two."""
        if self._greeted and status[:1] in ("2", "3", b"2", b"3"):
            self.spoken = True
            self.sessions.progressed(self)
        self._greeted = True
        line = status if isinstance(status, bytes) else status.encode(self._charset)
        line += b"\r\n"
        if self._held_size + len(line) <= HELD_BYTES and _held_back(line, self._reader):
            self._held.append(line)
            self._held_size += len(line)
            return
        if self._held:
            line = b"".join([*self._held, line])
            self._held.clear()
            self._held_size = 0
        self._writer.write(line)
        await self._writer.drain()

    @property
    def _charset(self) -> str:
        return "utf-8" if self.enable_SMTPUTF8 else "ascii"  # (as aiosmtpd's own push)

    def connection_lost(self, error: Exception | None) -> None:
        self.sessions.drop(self)
        super().connection_lost(error)

    @property
    def delivering(self) -> bool:
        """A message is on its way: MAIL accepted, and its data not yet answered."""
        envelope = self.envelope
        return self.storing or (envelope is not None and envelope.mail_from is not None)

    def _reset_timeout(self, duration: float | None = None) -> None:
        """aiosmtpd's (each command accepted, and at connect, puts off the idle timeout),
        without a timer made, and the one before cancelled, at each: the session's idle
        deadline moves, and its one timer, due before it, waits on for it when it fires
        (``_timeout_due``). A message pipelined had three timers made and three cancelled,
        and a seventh of the receiver's loop's time (py-spy, issue 23) went to them."""
        self._idle_until = until = self.loop.time() + (duration or self._timeout_duration)
        handle = self._timeout_handle
        if handle is not None and self._timer_pending and not handle.cancelled():
            if handle.when() <= until:
                return  # it fires first, and waits on
            handle.cancel()  # (a shorter duration than the one it was set for)
        self._timer_pending = True
        self._timeout_handle = self.loop.call_at(until, self._timeout_due)

    def _timeout_due(self) -> None:
        """The session's timer: the timeout if the deadline has come and no message of
        the session is being stored; else it waits on (a message stored counts from its
        answer: ``end_store``)."""
        self._timer_pending = False
        now = self.loop.time()
        if self.storing:
            self._idle_until = max(self._idle_until, now + self._timeout_duration)
        if now < self._idle_until:
            self._timer_pending = True
            self._timeout_handle = self.loop.call_at(self._idle_until, self._timeout_due)
            return
        self._timeout_cb()

    def _timeout_cb(self) -> None:
        """aiosmtpd's ``timeout``: the client said nothing for that long (no command,
        or its message not ended within it). Called by ``_timeout_due`` only, which never
        calls it while we store a message of the session."""
        if self.transport is None:
            return
        self.sessions.throttle(
            logging.INFO, "idle", f"LMTP: closed a session idle for {self._timeout_duration:.0f} s"
        )
        self.close_with("idle")

    def close_with(self, reason: str) -> None:
        """Say ``421`` (if the socket takes it at once) and close without waiting. A
        session closing already is closed all the same, unsaid: its transport waits to
        write what the client has not read (a QUIT's reply, to a client that reads
        nothing), and would wait for ever, its socket and place among the sessions held."""
        transport = self.transport
        if transport is None:
            return
        if isinstance(transport, asyncio.WriteTransport) and not transport.is_closing():
            closing = CLOSING[reason].format(host=self.hostname).encode() + b"\r\n"
            transport.write(b"".join([*self._held, closing]))  # (none held but in a group)
            self._held.clear()
            self._held_size = 0
        self.abort()

    def abort(self) -> None:
        """Close at once, dropping whatever is still to be written (asyncio's ``abort``
        does so for a transport closing already too)."""
        transport = self.transport
        if isinstance(transport, asyncio.WriteTransport):
            transport.abort()

    def begin_store(self) -> None:
        """The handler stores a message: until ``end_store`` the session is neither idle
        (``_timeout_due``) nor shed. (Two calls, not a context manager: the receiver's loop
        runs them for every message.)"""
        self.storing = True

    def end_store(self) -> None:
        """The message is stored, or could not be: its session's idle time counts anew."""
        self.storing = False
        if self.transport is not None:
            self.sessions.progressed(self)
            self._reset_timeout()


HELD_BYTES = 4096
"""Replies held back (``GuardedSMTP.push``) at most: past it they are written, and the
session waits while its client does not read them (``drain``), as with a reply each. A
client that sends thousands of commands at once and reads nothing held 2 MB of replies
a session (LHLO's reply is nine times its command), not 64 KB: the hostile review."""


def _held_back(line: bytes, reader: asyncio.StreamReader | None) -> bool:
    """Whether a reply ``line`` waits to be written with the next (``GuardedSMTP.push``):
    a line more of its reply follows (``250-``, as LHLO's), or a ``250`` while the client's
    next command has arrived already (a whole line of it read and not yet taken: the
    session takes it next, without waiting for anything, and answers it). Any other reply
    is written at once, with those held: a ``354`` the client waits for before its data,
    a refusal, ``221`` before closing. asyncio's StreamReader keeps what it has read in
    ``_buffer``; another without it holds back only the first kind."""
    if line[3:4] == b"-":
        return True
    if not line.startswith(b"250 "):
        return False
    waiting = getattr(reader, "_buffer", None)
    return isinstance(waiting, bytearray) and b"\n" in waiting


class GuardedLMTP(LMTP, GuardedSMTP):
    """The LMTP dialect (LHLO) of a guarded session."""


class Listener(asyncio.AbstractServer):
    """Our own accept loop, in place of ``loop.create_server``.

    asyncio's accept loop, out of file handles (``EMFILE``), logs a traceback for every
    connection waiting and schedules one more retry for each (110,846 tracebacks in 35 s
    in the review). Here a resource error pauses accepting for a moment, closes the
    idlest sessions to free handles, and is logged once per interval."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sockets: list[socket.socket],
        factory: Callable[[], asyncio.BaseProtocol],
        sessions: Sessions,
    ) -> None:
        self.loop = loop
        self.socks = sockets
        self.factory = factory
        self.sessions = sessions
        self.serving = True
        self.connecting = 0
        """Connections accepted, their sessions not yet made."""
        for sock in sockets:
            self._resume(sock)

    def _resume(self, sock: socket.socket) -> None:
        if self.serving and sock.fileno() >= 0:
            self.loop.add_reader(sock.fileno(), self._accept, sock)

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                self._cannot_accept(sock, exc)
                return
            conn.setblocking(False)
            self.loop.create_task(self._serve(conn))

    def _cannot_accept(self, sock: socket.socket, exc: OSError) -> None:
        """Out of handles: a quarter of the sessions (the idlest) go, and accepting resumes
        in a moment; at once would fail again before their handles are released."""
        self.loop.remove_reader(sock.fileno())
        shed = 0
        if exc.errno in RESOURCE_ERRORS:
            shed = self.sessions.shed(max(8, len(self.sessions) // 4))
        self.sessions.throttle(
            logging.WARNING,
            f"accept:{exc.errno}",
            f"LMTP: cannot accept connections: {exc.strerror or exc}"
            f" ({counted(len(self.sessions), 'session')} open; closed {counted(shed, 'idle one')})",
        )
        soon = shed or self.connecting  # handles are being freed, or about to be in use
        self.loop.call_later(0.05 if soon else 1.0, self._resume, sock)

    async def _serve(self, conn: socket.socket) -> None:
        self.connecting += 1
        try:
            await self.loop.connect_accepted_socket(self.factory, sock=conn)
        except Exception as exc:  # the peer went away before we were ready
            conn.close()
            self.sessions.throttle(
                logging.INFO, "connect", f"LMTP: a connection failed: {type(exc).__name__}"
            )
        finally:
            self.connecting -= 1

    # -- asyncio.AbstractServer, as aiosmtpd's Controller uses it ----------------------

    def close(self) -> None:
        self.serving = False
        for sock in self.socks:
            if sock.fileno() >= 0:
                self.loop.remove_reader(sock.fileno())
                sock.close()
        self.sessions.close_all()

    async def wait_closed(self) -> None:
        for _ in range(3):  # the sessions closed above, and their tasks, finish
            await asyncio.sleep(0)

    async def start_serving(self) -> None:
        """Serving already: the sockets are read from the start."""

    async def serve_forever(self) -> None:
        while self.serving:
            await asyncio.sleep(1.0)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self.loop

    def is_serving(self) -> bool:
        return self.serving

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self.socks)


def listening_sockets(host: str, port: int) -> list[socket.socket]:
    """Bound, listening, non-blocking sockets for every address of ``host`` (as asyncio's
    ``create_server`` binds them)."""
    found = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(found):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(128)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def session_limit(wanted: int) -> int:
    """``wanted``, but never more than half the process's file handles: the database, the
    parse workers and the mail out need theirs (``ulimit -n``; systemd's default is 1,024)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(2, min(wanted, soft // 2))
