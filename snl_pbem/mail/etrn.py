"""Asking the MTA to deliver now what it queued for the game while snl-pbem was down.

While ``serve`` is stopped, the MTA defers the game's mail and retries it later: Postfix
after ``minimal_backoff_time`` (300 s), found by a queue run every ``queue_run_delay``
(300 s), so up to about 10 minutes after the restart, and longer after a longer outage.
RFC 1985's ``ETRN <domain>`` asks an SMTP server to start delivering what it holds for the
domain now. Postfix answers ``250 Queuing started`` for a domain in ``fast_flush_domains``
(by default ``$relay_domains``) and ``459 <domain>: service unavailable`` for any other;
``smtpd_etrn_restrictions`` may refuse it. No privilege is needed, unlike ``postqueue -f``.
"""

from __future__ import annotations

import contextlib
import smtplib
import time
from collections.abc import Iterable

TIMEOUT = 30.0
"""Seconds for the whole exchange, however many replies (the MTA answers ETRN at once): a
hung MTA costs this once, not once per reply."""


FIX = (
    "Postfix: make the domain a relay domain (relay_domains) or list it in "
    "fast_flush_domains, and let this host send ETRN (smtpd_etrn_restrictions); other "
    "MTAs: deploy/postfix-lmtp.md; or set [mail.lmtp] etrn_server to the MTA's SMTP "
    'server, or to "" not to ask'
)
"""What to do when the MTA could not be asked or said no."""


class EtrnRefused(Exception):
    """The MTA could not be asked, or said no: the message says which and what to do."""


def ask_to_deliver(
    server: tuple[str, int], domains: Iterable[str], helo: str, timeout: float = TIMEOUT
) -> None:
    """Send ``ETRN domain`` for each domain, all within ``timeout`` seconds; raises
    EtrnRefused unless each is taken (RFC 1985 §5: 250 started, 251 none waiting, 252 and
    253 pending messages started)."""
    host, port = server
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    end = time.monotonic() + timeout

    def left(client: smtplib.SMTP) -> smtplib.SMTP:
        """The client, its socket's timeout cut to what is left of the whole."""
        remaining = end - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no answer within {timeout:g} s")
        if client.sock is not None:
            client.sock.settimeout(remaining)
        return client

    try:
        client = smtplib.SMTP(host, port, local_hostname=helo, timeout=timeout)
        try:
            code, text = left(client).ehlo()
            if not 200 <= code < 300:
                code, text = left(client).helo()
            if not 200 <= code < 300:
                raise EtrnRefused(f"{where} refused our greeting: {_reply(code, text)}")
            for domain in domains:
                code, text = left(client).docmd("ETRN", domain)
                if code not in (250, 251, 252, 253):
                    raise EtrnRefused(f"{where} answered ETRN {domain} with {_reply(code, text)}")
            with contextlib.suppress(OSError, smtplib.SMTPException):  # taken: QUIT is manners
                left(client).quit()
        finally:
            client.close()  # no QUIT after a failure: it could wait on the MTA again
    except (OSError, smtplib.SMTPException) as exc:
        raise EtrnRefused(f"could not ask {where}: {type(exc).__name__}: {exc}") from None


def _reply(code: int, text: bytes) -> str:
    return f"{code} {text.decode('utf-8', 'replace').replace(chr(10), ' ')}".strip()
