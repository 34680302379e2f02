"""An LMTP (or SMTP) receiver for an MTA that delivers the game address to us (aiosmtpd).

Like Mailman's ``runners/lmtp.py``: check the envelope, store, answer. The
reply codes live in one table:

- ``550`` for a recipient that is not the game address;
- ``552`` for a message over the size cap (aiosmtpd's own check, before storing);
- ``451`` when the message could not be stored (database busy): the MTA retries;
- ``250`` only once the message is committed to the database.

``deliver`` is the service layer's ``ingest``; this module knows nothing of games.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.lmtp import LMTP
from aiosmtpd.smtp import SMTP, Envelope, Session

log = logging.getLogger("snl_pbem.lmtp")

STATUS = {
    "stored": "250 2.0.0 Stored",
    "recipient_ok": "250 2.1.5 OK",
    "not_here": "550 5.1.1 <{address}>: not the game address; nothing is delivered here",
    "temporary": "451 4.3.0 Temporary failure storing the message; please try again later",
}

Deliver = Callable[[bytes, str], object]
"""Store (and process) one raw message; raises if it could not be stored."""


class GameAddressHandler:
    """aiosmtpd handler: accepts mail for the game address only, stores it, then says 250."""

    def __init__(self, address: str, deliver: Deliver, *, lmtp: bool = True) -> None:
        self.address = address.lower()
        self.deliver = deliver
        self.lmtp = lmtp

    async def handle_RCPT(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        if address.strip("<>").lower() != self.address:
            log.info("refused recipient %s from %s", address, session.peer)
            return STATUS["not_here"].format(address=address)
        envelope.rcpt_tos.append(address)
        return STATUS["recipient_ok"]

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        raw = envelope.original_content or b""
        peer = session.peer[0] if isinstance(session.peer, tuple) else str(session.peer)
        # LMTP (RFC 2033 §4.2): one reply per accepted recipient.
        replies = max(1, len(envelope.rcpt_tos)) if self.lmtp else 1
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, self.deliver, raw, f"lmtp:{peer}")
        except Exception as exc:
            log.error("could not store a message from %s: %s: %s", peer, type(exc).__name__, exc)
            return "\r\n".join([STATUS["temporary"]] * replies)
        return "\r\n".join([STATUS["stored"]] * replies)


class ReceiverController(Controller):
    """Runs the receiver in its own thread and event loop (aiosmtpd's Controller)."""

    def __init__(
        self,
        handler: GameAddressHandler,
        host: str,
        port: int,
        *,
        max_size: int,
        lmtp: bool = True,
        **kwargs: Any,
    ) -> None:
        self.max_size = max_size
        self.use_lmtp = lmtp
        super().__init__(handler, hostname=host, port=port, **kwargs)

    def factory(self) -> SMTP:
        server_class = LMTP if self.use_lmtp else SMTP
        return server_class(
            self.handler,
            data_size_limit=self.max_size,
            enable_SMTPUTF8=True,
            decode_data=False,
            ident="snl-pbem",
        )
