"""A capturing SMTP server (aiosmtpd) standing in for the world's mail: real SMTP, on loopback.

``script`` makes it answer a recipient with chosen codes (``["451", "250"]``:
a temporary failure, then success); ``stop()`` and ``start()`` take it down
and bring it back on the same port.
"""

from __future__ import annotations

import email
import socket
import threading
from dataclasses import dataclass, field

from aiosmtpd.controller import Controller

ANSWERS = {
    "421": "421 4.3.2 Service shutting down",
    "451": "451 4.3.0 Try again later",
    "452": "452 4.2.2 Mailbox full",
    "550": "550 5.1.1 No such user",
    "554": "554 5.7.1 Rejected",
}


@dataclass
class Delivered:
    recipient: str
    raw: bytes

    @property
    def message_id(self) -> str:
        return str(email.message_from_bytes(self.raw)["Message-ID"])


@dataclass
class SinkHandler:
    delivered: list[Delivered] = field(default_factory=list)
    script: dict[str, list[str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        with self.lock:
            plan = self.script.get(address.lower())
            code = plan.pop(0) if plan else "250"
        if code != "250":
            return ANSWERS[code]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        with self.lock:
            for rcpt in envelope.rcpt_tos:
                self.delivered.append(Delivered(rcpt.lower(), envelope.original_content))
        return "250 2.0.0 Queued"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class SmtpSink:
    def __init__(self) -> None:
        self.handler = SinkHandler()
        self.host = "127.0.0.1"
        self.port = free_port()
        self._controller: Controller | None = None

    def start(self) -> SmtpSink:
        self._controller = Controller(self.handler, hostname=self.host, port=self.port)
        self._controller.start()
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    @property
    def delivered(self) -> list[Delivered]:
        return self.handler.delivered
