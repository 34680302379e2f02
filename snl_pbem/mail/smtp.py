"""Sending one message over SMTP, and saying whether a failure is worth retrying.

One persistent connection per sender (TLS, STARTTLS or plain, AUTH when a
username is configured); a dropped connection is reopened and the message
retried once. Replies are classified: 2xx sent, 4xx temporary, 5xx
permanent. A server that cannot be reached, refuses the session (its
greeting, TLS or AUTH fails) or says 421 is *unreachable*: that says nothing
about the message, so the outbox waits for the server rather than counting
it against each message.

:class:`Sender` is all the outbox asks of a sender (snl_pbem.app.outbox); :class:`SmtpSender`
is the one the server builds. Another mail library is another class with those two methods.
"""

from __future__ import annotations

import logging
import re
import smtplib
import ssl
from dataclasses import dataclass
from typing import Protocol

from snl_pbem.mail.addrspec import PLAIN_ADDRESS

log = logging.getLogger("snl_pbem.smtp")


@dataclass(frozen=True)
class SmtpConfig:
    host: str
    port: int
    tls: str  # ssl, starttls, none
    username: str | None = None
    password: str | None = None
    timeout: float = 60.0
    ssl_context: ssl.SSLContext | None = None


class SendError(Exception):
    """A message not accepted; ``permanent`` for a 5xx answer, ``unreachable`` when the
    server itself is down or refuses the session (temporary, and not the message's fault)."""

    def __init__(self, message: str, *, permanent: bool, unreachable: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent and not unreachable
        self.unreachable = unreachable


class Sender(Protocol):
    """What the outbox needs of a sender: one message at a time to one recipient, on a
    connection it may keep open between messages."""

    def send(self, recipient: str, message: bytes) -> None:
        """Hand ``message`` (as stored, CRLF line ends) on for ``recipient``; raise
        :class:`SendError` when it was not accepted (saying whether to try again)."""

    def close(self) -> None:
        """Let go of the connection, if any: the outbox is done with this sender."""


class SmtpSender:
    """A :class:`Sender` over SMTP (smtplib)."""

    def __init__(self, config: SmtpConfig, envelope_from: str) -> None:
        self.config = config
        self.envelope_from = envelope_from
        self._client: smtplib.SMTP | None = None
        self._from = _quote(envelope_from)

    def _connect(self) -> smtplib.SMTP:
        cfg = self.config
        context = cfg.ssl_context or ssl.create_default_context()
        client: smtplib.SMTP
        if cfg.tls == "ssl":
            client = smtplib.SMTP_SSL(cfg.host, cfg.port, timeout=cfg.timeout, context=context)
        else:
            client = smtplib.SMTP(cfg.host, cfg.port, timeout=cfg.timeout)
        try:
            client.ehlo_or_helo_if_needed()
            if cfg.tls == "starttls":
                client.starttls(context=context)
                client.ehlo()
            if cfg.username:
                client.login(cfg.username, cfg.password or "")
        except Exception:
            _quietly_close(client)
            raise
        return client

    def send(self, recipient: str, message: bytes) -> None:
        """Send, or raise :class:`SendError`; reconnects and retries once when dropped."""
        for attempt in (1, 2):
            if self._client is None:
                try:
                    self._client = self._connect()
                except (smtplib.SMTPException, OSError) as exc:
                    raise SendError(
                        f"cannot open an SMTP session with {self.config.host}:"
                        f"{self.config.port}: {_describe(exc)}",
                        permanent=False,
                        unreachable=True,
                    ) from None
            try:
                refused = self._sendmail(self._client, recipient, message)
            except smtplib.SMTPRecipientsRefused as exc:
                code, text = next(iter(exc.recipients.values()))
                raise self._answer(code, text) from None
            except smtplib.SMTPResponseException as exc:
                raise self._answer(exc.smtp_code, exc.smtp_error) from None
            except (smtplib.SMTPServerDisconnected, OSError) as exc:
                self.close()
                if attempt == 1:
                    log.info("SMTP connection lost (%s); reconnecting once", exc)
                    continue
                raise SendError(
                    f"connection failed: {_describe(exc)}", permanent=False, unreachable=True
                ) from None
            if refused:
                code, text = next(iter(refused.values()))
                raise self._answer(code, text)
            return

    def _sendmail(
        self, client: smtplib.SMTP, recipient: str, message: bytes
    ) -> dict[str, tuple[int, bytes]]:
        """``client.sendmail(envelope_from, [recipient], message)``, step for step and with
        the same errors, but without parsing the same sender address again for every
        message (smtplib's address parsing was a tenth of the sender's time)."""
        client.ehlo_or_helo_if_needed()
        size = f" size={len(message)}" if client.does_esmtp and client.has_extn("size") else ""
        client.putcmd("mail", f"from:{self._from}{size}")
        code, resp = client.getreply()
        if code != 250:
            _reset_or_close(client, code)
            raise smtplib.SMTPSenderRefused(code, resp, self.envelope_from)
        client.putcmd("rcpt", f"to:{_quote(recipient)}")
        code, resp = client.getreply()
        if code not in (250, 251):
            _reset_or_close(client, code)
            raise smtplib.SMTPRecipientsRefused({recipient: (code, resp)})
        code, resp = client.data(message)
        if code != 250:
            _reset_or_close(client, code)
            raise smtplib.SMTPDataError(code, resp)
        return {}

    def _answer(self, code: int, text: bytes | str) -> SendError:
        if code == 421:  # the server is going away (at any step): not this message's fault
            self.close()
            return SendError(f"421 {_text(text)}".strip(), permanent=False, unreachable=True)
        return SendError(f"{code} {_text(text)}".strip(), permanent=500 <= code < 600)

    def close(self) -> None:
        if self._client is not None:
            _quietly_close(self._client)
            self._client = None


_PLAIN = re.compile(PLAIN_ADDRESS)


def _quote(address: str) -> str:
    """``smtplib.quoteaddr``: a plain address (all ours and players' are) is only put in
    angle brackets; anything else is parsed as smtplib does."""
    return f"<{address}>" if _PLAIN.fullmatch(address) else smtplib.quoteaddr(address)


def _reset_or_close(client: smtplib.SMTP, code: int) -> None:
    """After a refusal, as smtplib's sendmail: 421 ends the session, anything else RSET."""
    if code == 421:
        client.close()
        return
    try:
        client.rset()
    except smtplib.SMTPServerDisconnected:
        return


def _text(text: bytes | str) -> str:
    return text.decode(errors="replace") if isinstance(text, bytes) else str(text)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, smtplib.SMTPResponseException):
        return f"{exc.smtp_code} {_text(exc.smtp_error)}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _quietly_close(client: smtplib.SMTP) -> None:
    try:
        client.quit()
    except Exception:
        try:
            client.close()
        except Exception:  # already gone
            return
