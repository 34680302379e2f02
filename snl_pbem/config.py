"""The referee's config file (DESIGN.md, "The referee's config file"): one TOML file,
and, when it sets ``games_dir``, one more file per game in that folder.

``load_config`` reads and checks everything at once — every key, every board,
every password file, every game file — and raises :class:`ConfigError` listing each
problem as ``config.toml: games[0].players[2].email: 'bob@' is not an email address``
(in a game file: ``games.d/club-7.toml: players[2].email: ...``). ``serve`` leaves out
only the game of a bad game file (``load_for_serve``).
Every option is documented on its field here (the schema) and in
``deploy/config.example.toml``.
"""

from __future__ import annotations

import logging
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from snl_pbem.boards import UnknownBoard, bundled_table, locate
from snl_pbem.errors import ConfigError, NotFound, no_such_game
from snl_pbem.i18n import DEFAULT as DEFAULT_LANGUAGE
from snl_pbem.i18n import codes_text
from snl_pbem.i18n import language as language_code
from snl_pbem.mail.addrspec import ATOM
from snl_pbem.rules import Board, BoardError, GameSetupError
from snl_pbem.rules.ruleset import DEFAULT_RULESET, RulesetSettings, get_ruleset, ruleset_names
from snl_pbem.rules.words import agree, counted, tr
from snl_pbem.timeutil import parse_duration, parse_time, wall_clock_add, zone

log = logging.getLogger("snl_pbem.config")

DEFAULT_CONFIG = Path("/etc/snl-pbem/config.toml")
ENV_CONFIG = "SNL_PBEM_CONFIG"
ENV_CREDENTIALS = "CREDENTIALS_DIRECTORY"
"""Set by systemd for a service given credentials (LoadCredential=): the folder holding them."""

_LABEL = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
_ATEXT = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-/=?^_`{|}~."
)
_GAME_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
_DNS_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_PLAIN_ADDRESS = re.compile(rf"{ATOM}(?:\.{ATOM})*@{_DNS_LABEL}(?:\.{_DNS_LABEL})+")
"""An address ``_address_problem`` finds nothing wrong with, lengths apart: one match
instead of its checks one by one (a config of thousands of games has 100,000 addresses)."""


def _email(value: object) -> str:
    """An address the server can send to as it is: plain ASCII (no SMTPUTF8), no spaces or
    control characters, one @, a dot-atom before it and a domain name after it."""
    if not isinstance(value, str):
        raise ValueError(f'{value!r} is not an email address (write e.g. "ann@example.org")')
    problem = _not_ascii(value) or _address_problem(value)
    if problem is not None:
        raise ValueError(problem)
    local, domain = value.rsplit("@", 1)
    return f"{local}@{domain.lower()}"


def address_problem(address: str) -> str | None:
    """Why ``address`` is not one the server can send to (as a config's would be), or None:
    for addresses given by mail (REPLACE, ADDRESS)."""
    return _not_ascii(address) or _address_problem(address)


def _not_ascii(address: str) -> str | None:
    """Why an address with non-ASCII characters cannot be used, and how to write it (in
    the reader's language when a mail shows it: snl_pbem.rules.words)."""
    if address.isascii():
        return None
    odd = list(dict.fromkeys(ch for ch in address if not ch.isascii()))
    chars = ", ".join(repr(ch) for ch in odd)
    local, at, domain = address.rpartition("@")
    if any(ch.isspace() or not ch.isprintable() for ch in odd):
        return tr(
            "{address} has an invisible non-ASCII character ({chars}), perhaps copied from "
            "a web page or a document: write the address in ASCII (type it again); for an "
            "internationalized domain use its xn-- form, e.g. 'ann@xn--mnchen-3ya.de'",
            address=repr(address),
            chars=chars,
        )
    ascii_domain = _idna(domain) if at else None
    if local.isascii() and ascii_domain is not None:
        fix = tr(
            "write the address in ASCII; for an internationalized domain use its xn-- form, "
            "here {ascii}",
            ascii=repr(local + "@" + ascii_domain),
        )
    elif at and not local.isascii():
        fix = tr(
            "write the address in ASCII; for an internationalized domain use its xn-- form, "
            "e.g. 'ann@xn--mnchen-3ya.de' for 'ann@münchen.de' (the part before the @ has "
            "no ASCII form: ask the player for another address)"
        )
    else:
        fix = tr(
            "write the address in ASCII; for an internationalized domain use its xn-- form, "
            "e.g. 'ann@xn--mnchen-3ya.de' for 'ann@münchen.de'"
        )
    return tr(
        "{address} has non-ASCII characters ({chars}) and mail is sent without SMTPUTF8: {fix}",
        address=repr(address),
        chars=chars,
        fix=fix,
    )


def _idna(domain: str) -> str | None:
    """The xn-- form of a domain, when Python's IDNA codec gives it without changing the
    name (it follows IDNA 2003, which maps e.g. 'ß' to 'ss': then it is not suggested)."""
    try:
        ascii_domain = domain.encode("idna").decode("ascii")
        same = ascii_domain.encode("ascii").decode("idna") == domain.lower()
    except UnicodeError:
        return None
    return ascii_domain.lower() if same and _domain_problem(ascii_domain) is None else None


def _address_problem(address: str) -> str | None:
    """Why an ASCII string is not an address the server can send to, or None."""
    if _PLAIN_ADDRESS.fullmatch(address) and len(address) <= 254:
        at = address.index("@")
        if at <= 64 and len(address) - at - 1 <= 253:
            return None
    if not address:
        return _not_an_address(address, tr("it is empty"))
    control = [ch for ch in address if ord(ch) < 32 or ord(ch) == 127]
    if control:
        return _not_an_address(
            address, tr("it has a control character ({char})", char=repr(control[0]))
        )
    if " " in address:
        return _not_an_address(address, tr("it has a space in it"))
    if len(address) > 254:
        return _not_an_address(address, tr("it is longer than 254 characters"))
    ats = address.count("@")
    if ats == 0:
        return _not_an_address(
            address, tr("it has no @ (write it as name@domain, e.g. ann@example.org)")
        )
    if ats > 1:
        return _not_an_address(address, tr("it has more than one @"))
    local, domain = address.split("@")
    if not local:
        return _not_an_address(address, tr("nothing before the @"))
    if not domain:
        return _not_an_address(address, tr("no domain after the @ (e.g. example.org)"))
    wrong = [ch for ch in local if ch not in _ATEXT]
    if wrong:
        return _not_an_address(
            address, tr("{char} cannot be used before the @", char=repr(wrong[0]))
        )
    if local.startswith(".") or local.endswith(".") or ".." in local:
        return _not_an_address(
            address,
            tr("the part before the @ cannot start or end with a dot, or have two together"),
        )
    if len(local) > 64:
        return _not_an_address(address, tr("the part before the @ is longer than 64 characters"))
    problem = _domain_problem(domain)
    return _not_an_address(address, problem) if problem else None


def _not_an_address(address: str, why: str) -> str:
    return tr("{address} is not an email address: {why}", address=repr(address), why=why)


def _domain_problem(domain: str) -> str | None:
    """Why a string is not a full ASCII domain name (``example.org``), or None."""
    labels = domain.split(".")
    if len(domain) > 253 or not all(_LABEL.match(label) for label in labels):
        return tr(
            "{domain} is not a domain name (letters, digits and '-' between dots)",
            domain=repr(domain),
        )
    if len(labels) < 2:
        return tr("{domain} is not a full domain name (e.g. example.org)", domain=repr(domain))
    return None


def _ascii_domain(value: object) -> object:
    if not isinstance(value, str):
        return value  # the str type says what is wrong
    if not value.isascii():
        ascii_domain = _idna(value)
        raise ValueError(
            f"{value!r} has non-ASCII characters: write the domain in ASCII, in its xn-- form"
            + (f", here {ascii_domain!r}" if ascii_domain else " (e.g. 'xn--mnchen-3ya.de')")
        )
    problem = _domain_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value.lower()


def _duration(value: object) -> timedelta:
    return parse_duration(value)


def _positive_duration(value: object) -> timedelta:
    delta = parse_duration(value)
    if delta <= timedelta(0):
        raise ValueError(f"{value!r} must be longer than 0s")
    return delta


def _keep_duration(value: object) -> timedelta | None:
    """keep_processed_mail, keep_sent_mail: a duration of at least a day, or false (keep
    forever)."""
    if value is False:
        return None
    if isinstance(value, bool):
        raise ValueError('write a duration such as "90d", or false to keep mail forever')
    delta = parse_duration(value)
    if delta < timedelta(days=1):
        raise ValueError(
            f"{value!r} is shorter than 1d: keep mail at least a day (the per-sender daily "
            "limits look at the last day's mail, and bounces come back for days), or write "
            "false to keep it forever"
        )
    return delta


Email = Annotated[str, BeforeValidator(_email)]
"""An address as the server sends to it: ASCII only (no SMTPUTF8); see ``_email``."""
Domain = Annotated[str, BeforeValidator(_ascii_domain)]
KeepDuration = Annotated[timedelta | None, BeforeValidator(_keep_duration)]
Duration = Annotated[timedelta, BeforeValidator(_duration)]
PositiveDuration = Annotated[timedelta, BeforeValidator(_positive_duration)]
Port = Annotated[int, Field(ge=1, le=65535)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Secret(_Section):
    password: str | None = None
    """The password itself (prefer password_file)."""
    password_file: Path | None = None
    """A file holding the password (its first line). A relative name is first looked up
    among the service's systemd credentials ($CREDENTIALS_DIRECTORY, from LoadCredential=),
    then beside the config file; see ``secret_file``."""

    @model_validator(mode="after")
    def _one_password(self) -> _Secret:
        if self.password is not None and self.password_file is not None:
            raise ValueError("give password or password_file, not both")
        return self


class ImapSettings(_Secret):
    """Poll a mailbox for orders (logging in with username and a password)."""

    host: str
    port: Port = 993
    tls: Literal["ssl", "starttls", "none"] = "ssl"
    username: str
    folder: str = "INBOX"
    processed_folder: str = "Processed"
    """Where handled mail is moved after it is safely stored."""
    poll_interval: PositiveDuration = timedelta(seconds=60)
    """How often to poll when the server has no IDLE (and as a fallback)."""
    healthy_within: PositiveDuration = timedelta(minutes=30)
    """A round does not close if the last good poll is older than this (circuit breaker)."""

    @model_validator(mode="after")
    def _has_password(self) -> ImapSettings:
        if self.password is None and self.password_file is None:
            raise ValueError(
                "password_file: missing: the mailbox is read by logging in as username with a "
                'password; give password_file = "imap.password" (the service\'s credential, '
                'deploy/README.md, "Secrets") or password = "..."' + without_password("imap")
            )
        return self


class LmtpSettings(_Section):
    """Receive mail from an MTA over LMTP (or SMTP)."""

    host: str = "127.0.0.1"
    port: Port = 8024
    protocol: Literal["lmtp", "smtp"] = "lmtp"
    mta_hostname: str | None = None
    """The name the delivering MTA writes in its ``Received: ... by NAME`` header (Postfix:
    ``myhostname``). Set, a message is timed by that header, the topmost one only, so an
    order the MTA accepted before a deadline counts however late it is delivered here;
    unset (or that header missing, not by NAME, or its date outside the window below), a
    message is timed when snl-pbem receives it. See snl_pbem.mail.received."""
    max_queue_time: PositiveDuration = timedelta(days=1)
    """The MTA's receipt time is believed only if it is at most this long ago."""
    redelivery_grace: Duration = timedelta(minutes=11)
    """After ``serve`` starts, no round closes for this long at most, so that mail the MTA
    kept queued while snl-pbem was down is delivered first; it ends sooner once the MTA,
    asked with ETRN (``etrn_server``), has delivered its queue. Longer than Postfix's own
    retry after a short outage (up to about 10 minutes), for when ETRN fails. ``"0s"``: no
    wait."""
    etrn_server: str = "127.0.0.1:25"
    """The MTA's SMTP server (``host:port``, ``[v6-address]:port``; the port defaults to
    25), asked at start-up (RFC 1985 ``ETRN``) to deliver now what it queued for the game
    address's domain while snl-pbem was down. ``""``: not asked (then rounds past their
    deadline wait the whole ``redelivery_grace``). See deploy/postfix-lmtp.md."""
    redelivery_settle: PositiveDuration = timedelta(seconds=10)
    """After the MTA took the ETRN, its queue counts as delivered once no delivery has
    started or been under way for this long; the start-up grace then ends."""
    max_sessions: Annotated[int, Field(ge=2, le=10000)] = 100
    """Open sessions at most (Postfix opens up to 20); at most half the process's file
    handles whatever is set. At the cap a new connection is still served: the session
    longest without a delivery is closed with 421 (never one storing a message), so idle
    connections cannot keep the MTA out. See snl_pbem.mail.sessions.Sessions."""
    idle_timeout: PositiveDuration = timedelta(minutes=5)
    """A session that sends no command for this long, or does not end its message within
    it, is closed with 421 (RFC 5321 §4.5.3.2.7: at least 5 minutes)."""

    @field_validator("etrn_server")
    @classmethod
    def _etrn_address(cls, value: str) -> str:
        if value.strip():
            etrn_address(value)  # raises ValueError naming what is wrong
        return value.strip()

    @property
    def etrn(self) -> tuple[str, int] | None:
        """``etrn_server`` as (host, port), or None when the MTA is not asked."""
        return etrn_address(self.etrn_server) if self.etrn_server else None


def etrn_address(value: str) -> tuple[str, int]:
    """``host``, ``host:port`` or ``[v6-address]:port`` as (host, port); port 25 if none."""
    text = value.strip()
    host, port = text, "25"
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f'{value!r}: write [v6-address]:port, e.g. "[::1]:25"')
        port = rest[1:] or "25"
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    elif ":" in text:
        raise ValueError(f'{value!r}: write a v6 address in brackets, e.g. "[::1]:25"')
    if not host or any(ch.isspace() for ch in host):
        raise ValueError(f'{value!r}: write host:port, e.g. "127.0.0.1:25"')
    if not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
        raise ValueError(f"{value!r}: the port must be a number from 1 to 65535")
    return host, int(port)


class SmtpSettings(_Secret):
    """Send mail."""

    host: str
    port: Port = 587
    tls: Literal["ssl", "starttls", "none"] = "starttls"
    username: str | None = None
    """Log in (SMTP AUTH) as this user, with the password; unset (and no password), mail is
    sent without logging in: a relay that takes the server's mail without a password."""
    connections: Annotated[int, Field(ge=1, le=32)] = 1
    give_up_after: PositiveDuration = timedelta(days=3)

    @model_validator(mode="after")
    def _login_or_none(self) -> SmtpSettings:
        """A username and a password go together: either alone is a mistake that would
        surface only when the relay refuses the first mail (or, a password without a
        username, never: it would be silently unused)."""
        given = "password_file" if self.password_file is not None else "password"
        if self.username is not None and self.password is None and self.password_file is None:
            raise ValueError(
                "password_file: missing: username is set, so the server logs in to the relay "
                'and needs a password; give password_file = "smtp.password" (the service\'s '
                'credential, deploy/README.md, "Secrets") or password = "..."'
                + without_password("smtp")
            )
        if self.username is None and (self.password is not None or self.password_file is not None):
            raise ValueError(
                f"username: missing: {given} is set, but the server logs in to the relay only "
                f'with a username; add username = "...", or remove {given} for a relay that '
                "takes mail without a password"
            )
        return self


class DkimSettings(_Section):
    """Sign outgoing mail with DKIM (publish the public key at SELECTOR._domainkey.DOMAIN)."""

    selector: str
    private_key_file: Path
    """A PEM RSA private key; relative to the config file."""
    domain: Domain | None = None
    """The signing domain (default: the game address's domain); ASCII (xn-- form)."""


class MailSettings(_Section):
    address: Email
    """The game address players write to."""
    referee: Email
    """Gets the full private round summary and every alert."""
    referee_key: Annotated[str, Field(min_length=12, max_length=128)] | None = None
    """The referee's key: with it, mail from ``referee`` runs the referee's commands
    (EXTEND, PAUSE, START...). Stored hashed; without it, no command by mail is obeyed."""
    max_message_size: Annotated[int, Field(ge=1024)] = 1024 * 1024
    replies_per_hour: Annotated[int, Field(ge=1)] = 20
    authserv_id: str | None = None
    """The referee's own MTA's authserv-id, whose Authentication-Results may be recorded."""
    keep_processed_mail: KeepDuration = timedelta(days=90)
    """How long the raw bytes of handled inbound mail (processed, rejected, ignored,
    duplicate) are kept whole; after that only their headers are kept (who sent what,
    when). Mail set aside or not yet processed is never trimmed. At least 1d;
    ``false`` (None here) keeps mail forever. See snl_pbem.app.retention."""
    keep_sent_mail: KeepDuration = timedelta(days=90)
    """How long mail we sent is kept whole after it was sent; after that only its headers
    and a fingerprint of its lines (no text) are kept, so a copy of it pasted in a reply
    is still known as ours. Mail waiting, failed, or bounced before then is never cut;
    mail holding an order key is cut as soon as it is sent. At least 1d; ``false`` keeps
    it forever. See snl_pbem.app.retention."""
    max_stored_per_sender: Annotated[int, Field(ge=1)] = 200
    """Inbound messages stored from one sender per day, at most (enforced by the intake)."""
    max_stored_bytes_per_sender: Annotated[int, Field(ge=1024)] = 20 * 1024 * 1024
    """Bytes of inbound mail stored from one sender per day, at most (enforced by the
    intake); not less than max_message_size, so one message of the largest size fits."""
    imap: ImapSettings | None = None
    lmtp: LmtpSettings | None = None
    smtp: SmtpSettings | None = None
    dkim: DkimSettings | None = None

    @field_validator("max_stored_bytes_per_sender")
    @classmethod
    def _daily_bytes_hold_a_message(cls, value: int, info: ValidationInfo) -> int:
        largest = info.data.get("max_message_size")
        if largest is not None and value < largest:
            raise ValueError(
                f"{value} is smaller than max_message_size ({largest}): a sender could not "
                "send one message of the largest size; raise it or lower max_message_size"
            )
        return value


class DatabaseSettings(_Section):
    url: str = "sqlite:///snl-pbem.db"
    """SQLAlchemy URL; a relative SQLite path is relative to the config file."""
    backups: Annotated[int, Field(ge=0, le=1000)] = 10
    """SQLite: online backups kept (one before each round close); 0 for none."""
    backup_dir: Path | None = None
    """SQLite: where backups go (default: a 'backups' folder beside the database); a
    relative path is relative to the config file, as every path in it is (load_config)."""

    @field_validator("url")
    @classmethod
    def _known_database(cls, url: str) -> str:
        if not url.startswith(("sqlite://", "postgresql://", "postgresql+psycopg://")):
            raise ValueError(f"{url!r}: use sqlite:///PATH or postgresql+psycopg://...")
        return url


def _language_code(value: str) -> str:
    code = language_code(value)
    if code is None:
        raise ValueError(f"{value!r} is not a language here (use one of: {codes_text()})")
    return code


class PlayerSettings(_Section):
    name: Annotated[str, Field(min_length=1, max_length=40)]
    email: Email
    key: Annotated[str, Field(min_length=6, max_length=64)] | None = None
    """The player's order key; generated and mailed at start when absent."""
    language: str | None = None
    """The language of the player's mail (default: the game's); they may change it by
    mail (LANGUAGE)."""

    @field_validator("language")
    @classmethod
    def _language(cls, value: str | None) -> str | None:
        return None if value is None else _language_code(value)

    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        if name != name.strip() or any(not ch.isprintable() for ch in name):
            raise ValueError(f"{name!r}: a name is printable text with no outer spaces")
        return name

    @field_validator("key")
    @classmethod
    def _plain_key(cls, key: str | None) -> str | None:
        if key is not None and (any(ch.isspace() for ch in key) or not key.isprintable()):
            raise ValueError("a key is printable text without spaces")
        return key


class GameSettings(_Section):
    id: str
    """Short name used in subjects (``[spring26]``) and orders (``GAME spring26``)."""
    title: str = ""
    board: str | dict[str, Any]
    """A file holding a [board] table (relative to the config file), a bundled board's name
    (``snl-pbem boards`` lists them; a file of the same name wins), or an inline table."""
    timezone: str | None = None
    """How this game's deadlines are read and shown (default: the top-level timezone)."""
    language: str = DEFAULT_LANGUAGE
    """The language of the players' mail, unless a player chose their own (snl_pbem.i18n:
    "en", "zh-Hans", "th")."""
    first_deadline: str | datetime
    round_length: PositiveDuration | None = None
    deadlines: list[str | datetime] | None = None
    """Explicit deadlines for the first rounds; round_length (or the last gap) continues."""
    ruleset: str = DEFAULT_RULESET
    """The rules the game is played by (snl_pbem.rules.ruleset): "postal" (RULES.md) or
    "classic" (RULES-CLASSIC.md)."""
    options: dict[str, Any] = {}
    """The ruleset's own options, written as keys of the game's table (classic: dice,
    bump, finish, ...); gathered here and checked by the ruleset."""
    double_from_round: Annotated[int, Field(ge=1)] = 7
    trapdoor_rule: Literal["all", "most-voted"] = "all"
    seed: int | None = None
    """Seeds the lot for most-voted ties (default: derived from the game id)."""
    remind_before: PositiveDuration | None = None
    close_when_all_in: bool = False
    settle_time: Duration = timedelta(minutes=10)
    """With close_when_all_in: how long after the last orders arrive the round closes."""
    reveal_after_game: bool = False
    signup: Literal["closed", "open", "approval"] = "closed"
    """Who may JOIN by mail: nobody ("closed": the players table only), anyone ("open"),
    or anyone the referee approves ("approval")."""
    min_players: Annotated[int, Field(ge=1, le=10000)] = 2
    """A game that takes sign-ups starts at ``starts`` only with at least this many."""
    max_players: Annotated[int, Field(ge=1, le=10000)] | None = None
    """Seats; later joiners go on the standby list (default: no limit)."""
    starts: str | datetime | None = None
    """When a game that takes sign-ups starts by itself: a time, or "when_full" (as soon as
    max_players have joined). Default: when the referee starts it."""
    auto_replace: bool = False
    """A resigned seat goes to the first standby at the next round close."""
    max_absence: PositiveDuration = timedelta(days=14)
    """ABSENT UNTIL may be at most this far ahead."""
    max_absent: Annotated[int, Field(ge=1)] = 3
    """Players of one game absent at the same time, at most (ABSENT is refused past it)."""
    max_extend: PositiveDuration = timedelta(days=7)
    """One EXTEND (by mail or command line) moves a deadline at most this much."""
    max_total_extend: PositiveDuration = timedelta(days=21)
    """All of a game's extensions together, at most (a pause does not count)."""
    players: list[PlayerSettings] = []

    @model_validator(mode="before")
    @classmethod
    def _gather_options(cls, data: Any) -> Any:
        """The ruleset's option keys, written at the game's top level, into ``options``
        (any other unknown key is still refused by name)."""
        if not isinstance(data, dict) or not isinstance(data.get("ruleset", DEFAULT_RULESET), str):
            return data
        ruleset = data.get("ruleset", DEFAULT_RULESET)
        try:
            keys = get_ruleset(ruleset).option_keys
        except ValueError:
            return data  # the ruleset's own check names it
        for other in ruleset_names():
            for key in get_ruleset(other).option_keys:
                if key in data and key not in keys:
                    raise ValueError(
                        f"{key}: an option of the {other} game, and this game's ruleset is "
                        f'"{ruleset}" (set ruleset = "{other}" to play with it, or remove it)'
                    )
        gathered = {k: data[k] for k in keys if k in data}
        if not gathered:
            return data
        rest = {k: v for k, v in data.items() if k not in gathered}
        return {**rest, "options": {**dict(data.get("options") or {}), **gathered}}

    @model_validator(mode="after")
    def _check_options(self) -> GameSettings:
        options = get_ruleset(self.ruleset).read_options(self.options, "")
        object.__setattr__(self, "options", options)  # frozen: the checked, complete set
        return self

    @field_validator("id")
    @classmethod
    def _game_id(cls, value: str) -> str:
        if not _GAME_ID.match(value):
            raise ValueError(f"{value!r}: a game id is 1-32 lower-case letters, digits, '-' or '_'")
        return value

    @field_validator("ruleset")
    @classmethod
    def _ruleset(cls, value: str) -> str:
        get_ruleset(value)  # GameSetupError (a ValueError) naming the rulesets there are
        return value

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        if value is not None:
            zone(value)
        return value

    @field_validator("language")
    @classmethod
    def _language(cls, value: str) -> str:
        return _language_code(value)

    @model_validator(mode="after")
    def _seats(self) -> GameSettings:
        if self.signup == "closed" and not self.players:
            raise ValueError(
                'players: a game with signup = "closed" needs at least one player (add a '
                '[[games.players]] table, or set signup = "open" to let players JOIN by mail)'
            )
        if self.max_players is not None:
            if self.max_players < len(self.players):
                raise ValueError(
                    f"max_players: {self.max_players} is fewer than the "
                    f"{counted(len(self.players), 'player')} the config lists; raise it"
                )
            if self.max_players < self.min_players:
                raise ValueError(
                    f"max_players: {self.max_players} is fewer than min_players "
                    f"({self.min_players}); raise max_players or lower min_players"
                )
        if self.starts == "when_full" and self.max_players is None:
            raise ValueError('starts: "when_full" needs max_players (how many make it full)')
        if self.starts is not None and self.signup == "closed":
            raise ValueError(
                'starts: only a game that takes sign-ups starts by itself; set signup = "open" '
                'or "approval", or remove starts (the referee starts a closed game)'
            )
        return self

    @model_validator(mode="after")
    def _unique_players(self) -> GameSettings:
        problems = []
        for attr in ("name", "email"):
            seen: set[str] = set()
            for player in self.players:
                value = getattr(player, attr).lower()
                if value in seen:
                    problems.append(f"{attr} {getattr(player, attr)!r} is used twice")
                seen.add(value)
        keys = [p.key for p in self.players if p.key is not None]
        if len(keys) != len(set(keys)):
            problems.append("two players have the same key")
        if problems:
            raise ValueError("players: " + "; ".join(problems))
        return self


class WebSettings(_Section):
    """The game pages: a static site of every game, rewritten as games change."""

    dir: Path
    """Where the site is written (the folder a web server serves); relative to the config
    file. Created when missing."""
    base_url: str | None = None
    """How players reach that folder, e.g. "https://games.example.org/snl/": reports end
    with their game page's link. Without it the site is written but not linked."""

    @field_validator("dir", mode="before")
    @classmethod
    def _folder_named(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            raise ValueError('name a folder, e.g. dir = "/var/www/snl-pbem", or remove [web]')
        return value

    @field_validator("base_url")
    @classmethod
    def _web_address(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(
                f"{value!r} is not a web address: write it as players type it, e.g. "
                '"https://games.example.org/snl/"'
            )
        if parts.query or parts.fragment:
            raise ValueError(f"{value!r}: a folder's address has no ?query or #fragment")
        return value if value.endswith("/") else value + "/"


class Settings(_Section):
    timezone: str = "UTC"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    database: DatabaseSettings = DatabaseSettings()
    mail: MailSettings
    games: list[GameSettings] = []
    web: WebSettings | None = None
    games_dir: Path | None = None
    """A folder of game files, one game each (the conf.d habit): every ``*.toml`` in it,
    in name order, written as one ``[[games]]`` table's keys; relative to the config
    file. Read at start and on reload; a bad file leaves out only its game (``serve``)."""

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        zone(value)
        return value

    @field_validator("games_dir", mode="before")
    @classmethod
    def _folder_named(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            raise ValueError('name a folder, e.g. "games.d", or remove games_dir')
        return value

    @model_validator(mode="after")
    def _unique_games(self) -> Settings:
        ids = [g.id for g in self.games]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ValueError("games: game ids used twice: " + ", ".join(twice))
        return self


@dataclass(frozen=True)
class Schedule:
    """A game's deadlines: explicit ones first, then every round_length on the wall clock."""

    tz: ZoneInfo
    first: datetime
    round_length: timedelta | None
    explicit: tuple[datetime, ...]

    def deadline(self, round_number: int) -> datetime:
        """The scheduled deadline of a round (UTC)."""
        listed = (self.first, *self.explicit)
        if round_number <= len(listed):
            return listed[round_number - 1]
        step = self.round_length
        if step is None:  # continue at the last listed gap
            step = listed[-1] - listed[-2] if len(listed) > 1 else timedelta(days=7)
        return wall_clock_add(listed[-1], step * (round_number - len(listed)), self.tz)


@dataclass(frozen=True)
class GameConfig:
    """A game as configured, with its board loaded and its schedule worked out."""

    settings: GameSettings
    board: Board
    board_table: Mapping[str, Any]
    schedule: Schedule
    starts_at: datetime | None = None
    """``starts`` as a time (None for "when_full" or no ``starts``)."""
    file: str | None = None
    """The game file it came from, as the config names it (``games.d/club-7.toml``); None
    for a game of the config file itself."""
    where: str = ""
    """How its keys are named in a problem: ``config.toml: games[2].`` or
    ``games.d/club-7.toml: `` (then the key)."""

    @property
    def id(self) -> str:
        return self.settings.id

    @property
    def tz(self) -> ZoneInfo:
        return self.schedule.tz

    @cached_property
    def player_languages(self) -> dict[str, str]:
        """The languages the players table sets, by lower-cased name (a choice made by
        mail, kept in the database, comes before it)."""
        return {p.name.lower(): p.language for p in self.settings.players if p.language}

    @property
    def seed(self) -> int:
        if self.settings.seed is not None:
            return self.settings.seed
        return int.from_bytes(self.settings.id.encode()[:8].ljust(8, b"\0"), "big")


@dataclass(frozen=True)
class LeftOut:
    """A game file with problems, left out of the config (``serve``, and the referee's
    commands, go on with the other games)."""

    file: str
    """As the config names it: ``games.d/club-7.toml``."""
    game_id: str | None
    """The id the file gives, when it gives a valid one."""
    problems: tuple[str, ...]
    """One line each, naming the file and the key: ``games.d/club-7.toml: players[2].email:
    ...``."""
    kept: tuple[str, ...] = ()
    """The games whose running version is kept instead (a reload, ``running=``)."""


@dataclass(frozen=True)
class Config:
    """The whole checked config."""

    path: Path
    settings: Settings
    games: tuple[GameConfig, ...]
    database_url: str
    left_out: tuple[LeftOut, ...] = ()
    """Game files with problems, when they were left out (``leave_out_bad_games``)."""
    game_files: tuple[Path, ...] = ()
    """Every game file read from ``games_dir``, good or not, in name order."""

    def find(self, game_name: str) -> GameConfig | None:
        """The game's table, or None when the config has no game of that id."""
        return self._by_id.get(game_name)

    @cached_property
    def _by_id(self) -> dict[str, GameConfig]:
        """The games by id: a look-up per game of thousands was a scan each (the site's
        pass, LIST), quadratic in the games."""
        return {game.id: game for game in self.games}

    def game(self, game_name: str) -> GameConfig:
        for game in self.games:
            if game.id == game_name:
                return game
        for bad in self.left_out:
            if bad.game_id == game_name:
                raise NotFound(
                    f"game {game_name!r}: its file {bad.file} has problems, so it is left "
                    f"out until they are fixed: {'; '.join(bad.problems)}"
                )
        raise no_such_game(game_name, [g.id for g in self.games], str(self.path))

    def dkim_key(self) -> bytes | None:
        dkim = self.settings.mail.dkim
        return self._relative(dkim.private_key_file).read_bytes() if dkim else None

    def password(self, section: _Secret) -> str | None:
        if section.password_file is not None:
            path = secret_file(section.password_file, self.path.parent)
            return path.read_text(encoding="utf-8").splitlines()[0].strip()
        return section.password

    def _relative(self, path: Path) -> Path:
        return path if path.is_absolute() else self.path.parent / path


def secret_file(file: Path, base: Path) -> Path:
    """Where a ``password_file`` is read. An absolute path is used as it is. A relative name
    is the service's credential of that name when systemd passed one
    (``$CREDENTIALS_DIRECTORY/NAME``, from ``LoadCredential=NAME:...`` in the unit), and
    otherwise a file relative to the config file's folder ``base``."""
    if file.is_absolute():
        return file
    credentials = os.environ.get(ENV_CREDENTIALS)
    if credentials:
        candidate = Path(credentials) / file
        if candidate.is_file():
            return candidate
    return base / file


def config_path(given: str | os.PathLike[str] | None) -> Path:
    """``--config FILE``, then ``$SNL_PBEM_CONFIG``, then /etc/snl-pbem/config.toml."""
    if given:
        return Path(given)
    if os.environ.get(ENV_CONFIG):
        return Path(os.environ[ENV_CONFIG])
    return DEFAULT_CONFIG


def load_config(
    path: Path,
    *,
    passwords: bool = True,
    signing_key: bool = True,
    leave_out_bad_games: bool = False,
    running: Config | None = None,
) -> Config:
    """Read and check a config file, and the game files of its ``games_dir``;
    :class:`ConfigError` lists every problem.

    ``passwords`` (the IMAP and SMTP password files, which only ``serve`` uses) and
    ``signing_key`` (the DKIM key, which every command that queues mail uses) may be left
    unread: a referee's read-only command needs neither, and runs without them.

    A game file with problems makes the whole config bad, unless ``leave_out_bad_games``:
    then only its game is left out (``Config.left_out``) and the others are used; given
    ``running`` (the config a server runs by, on a reload), the running version of a game
    whose file went bad is kept instead. Problems of the config file itself always raise.
    """
    name = path.name
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError:
        raise ConfigError([f"{path}: not UTF-8 text"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{name}: not valid TOML: {exc}"]) from None
    problems: list[str] = []
    settings: Settings | None = None
    try:
        settings = Settings.model_validate(raw)
    except ValidationError as exc:
        problems.extend(_describe(name, exc))

    # Boards, schedules, password files and game files are checked even when the schema
    # is not valid, so that the referee sees every problem at once.
    base = path.parent
    mail: dict[str, Any] = raw["mail"] if isinstance(raw.get("mail"), dict) else {}
    for key in ("imap", "smtp") if passwords else ():
        section = mail.get(key)
        if isinstance(section, dict) and isinstance(section.get("password_file"), str):
            problem = password_file_problem(Path(section["password_file"]), base, key)
            if problem is not None:
                problems.append(f"{name}: mail.{key}.password_file: {problem}")
    dkim = mail.get("dkim") if signing_key else None
    if isinstance(dkim, dict) and isinstance(dkim.get("private_key_file"), str):
        key_file = base / dkim["private_key_file"]
        try:
            if b"PRIVATE KEY" not in key_file.read_bytes():
                problems.append(
                    f"{name}: mail.dkim.private_key_file: {key_file} holds no PEM private key"
                )
        except OSError as exc:
            problems.append(
                f"{name}: mail.dkim.private_key_file: cannot read {key_file}: {exc.strerror or exc}"
            )
    raw_games: list[Any] = raw["games"] if isinstance(raw.get("games"), list) else []
    default_tz = raw.get("timezone", "UTC")
    boards: _Boards = {}
    built = [
        _game_parts(game, base, default_tz, name, f"games[{index}].", problems, boards)
        for index, game in enumerate(raw_games)
    ]
    for index, (game_settings, parts) in enumerate(
        zip(settings.games if settings else [], built, strict=False)
    ):
        if parts is not None:
            problem = _ruleset_problem(game_settings, parts[0])
            if problem is not None:
                problems.append(f"{name}: games[{index}].{problem}")

    files: list[Path] = []
    read: list[_GameFile] = []
    games_dir = raw.get("games_dir")
    if isinstance(games_dir, str) and games_dir.strip():
        folder = base / games_dir
        try:
            files = game_files(folder)
        except OSError as exc:
            problems.append(
                f"{name}: games_dir: cannot read the folder {folder}: {exc.strerror or exc}"
            )
        for file in files:
            label = str(Path(games_dir) / file.name)
            read.append(_read_game_file(file, label, base, default_tz, boards))
        main_ids = {
            game["id"]: index
            for index, game in enumerate(raw_games)
            if isinstance(game, dict) and isinstance(game.get("id"), str)
        }
        _no_id_twice(read, main_ids, name)

    bad_files = [game_file for game_file in read if game_file.game is None]
    if problems or settings is None or (bad_files and not leave_out_bad_games):
        raise ConfigError(problems + [p for game_file in read for p in game_file.problems])
    backup_dir = settings.database.backup_dir
    if backup_dir is not None and not backup_dir.is_absolute():  # not the process's cwd
        database = settings.database.model_copy(
            update={"backup_dir": (base / backup_dir).resolve()}
        )
        settings = settings.model_copy(update={"database": database})
    if settings.web is not None and not settings.web.dir.is_absolute():
        web = settings.web.model_copy(update={"dir": (base / settings.web.dir).resolve()})
        settings = settings.model_copy(update={"web": web})
    games = []
    for index, (game_settings, parts) in enumerate(zip(settings.games, built, strict=True)):
        assert parts is not None  # the schema and the board both passed
        games.append(GameConfig(game_settings, *parts, where=f"{name}: games[{index}]."))
    good = {game.id for game in games} | {f.game.id for f in read if f.game is not None}
    left_out = []
    for game_file in read:
        if game_file.game is not None:
            games.append(game_file.game)
            continue
        kept = []
        for old in running.games if running is not None else ():
            if old.id not in good and (old.file == game_file.file or old.id == game_file.game_id):
                games.append(old)  # the running version, until the file is fixed
                kept.append(old.id)
                good.add(old.id)
        left_out.append(
            LeftOut(game_file.file, game_file.game_id, tuple(game_file.problems), tuple(kept))
        )
    database_url = _database_url(settings.database.url, base)
    if settings.web is not None:
        _web_dir_is_public(settings, database_url, path)
    return Config(path, settings, tuple(games), database_url, tuple(left_out), tuple(files))


def _web_dir_is_public(settings: Settings, database_url: str, path: Path) -> None:
    """``[web] dir`` is served to anyone: it must not hold the database, its backups, the
    config or the game files (a folder of its own, or inside one of theirs, is fine)."""
    assert settings.web is not None
    site = settings.web.dir.resolve()
    private = []
    if database_url.startswith("sqlite:///") and database_url != "sqlite:///:memory:":
        folder = Path(database_url[len("sqlite:///") :]).resolve().parent
        private.append(("the database's folder", folder))
        backups = settings.database.backup_dir
        private.append(("database.backup_dir", (backups or folder / "backups").resolve()))
    if settings.games_dir is not None:
        private.append(("games_dir", (path.parent / settings.games_dir).resolve()))
    private.append(("the config file's folder", path.resolve().parent))
    for name, folder in private:
        if folder == site or folder.is_relative_to(site):
            instead = (
                folder / "site" if name == "the database's folder" else "/var/lib/snl-pbem/site"
            )
            raise ConfigError(
                [
                    f"web.dir: {site} would publish {name} ({folder}): the pages are served "
                    f'to anyone; give them a folder of their own, e.g. dir = "{instead}"'
                ]
            )


def load_for_serve(path: Path, running: Config | None = None) -> Config:
    """The config as ``serve`` runs by it, at start and (``running``) on a reload: a game
    file with problems leaves out only its own game, logged as an ERROR naming the file,
    the key and what becomes of the game. ConfigError for the config file's own problems."""
    config = load_config(path, leave_out_bad_games=True, running=running)
    for bad in config.left_out:
        if bad.kept:
            games = f"{agree(len(bad.kept), 'game')} {', '.join(bad.kept)}"
            fate = f"{games} {agree(len(bad.kept), 'runs', 'run')} on as loaded before"
        else:
            fate = (
                "its game is left out (a game already in the database plays on as stored "
                "there, its rounds closing on time, with sign-up by mail closed)"
            )
        log.error(
            "%s; %s until the file is fixed: fix it, check it with snl-pbem check-config, "
            "then reload (systemctl reload snl-pbem)",
            "; ".join(bad.problems),
            fate,
        )
    return config


_Parts = tuple[Board, Mapping[str, Any], Schedule, datetime | None]
"""What a game table gives beyond its settings: board, board table, schedule, start time."""

_Boards = dict[str, tuple[Board, Mapping[str, Any]]]
"""The boards named in one load (a bundled name or a file), read and checked once: the
games of a club share a few boards, and thousands of games start up in seconds."""


def _game_parts(
    game: object,
    base: Path,
    default_tz: object,
    label: str,
    prefix: str,
    problems: list[str],
    boards: _Boards,
) -> _Parts | None:
    """The board and the schedule of a raw game table, or None; each problem is added to
    ``problems`` as ``label: prefix+key: ...`` (``config.toml: games[2].board...``)."""
    if not isinstance(game, dict) or not isinstance(game.get("board"), (str, dict)):
        return None  # the schema names it
    board: Board | None = None
    schedule: Schedule | None = None
    spec = game["board"]
    try:
        if isinstance(spec, str) and spec in boards:
            board, table = boards[spec]
        else:
            table = _board_table(spec, base, f"{prefix}board")
            board = Board.from_mapping(table, f"{prefix}board")
            if isinstance(spec, str):
                boards[spec] = board, table
    except (BoardError, ConfigError) as exc:
        problems.extend(f"{label}: {p}" for p in exc.problems)
    starts_at = None
    try:
        schedule = _schedule(game, default_tz)
        if game.get("starts") not in (None, "when_full"):
            try:
                starts_at = parse_time(game["starts"], schedule.tz)
            except ValueError as exc:
                raise ValueError(f'starts: {exc} (or write "when_full")') from None
    except ValueError as exc:
        problems.append(f"{label}: {prefix}{exc}")
    if board is None or schedule is None:
        return None
    return board, table, schedule, starts_at


def _ruleset_problem(settings: GameSettings, board: Board) -> str | None:
    """What the game's ruleset finds wrong with its board and options (classic: C4)."""
    try:
        get_ruleset(settings.ruleset).check_settings(
            RulesetSettings(
                board=board,
                double_from_round=settings.double_from_round,
                trapdoor_rule=settings.trapdoor_rule,
                options=settings.options,
            )
        )
    except GameSetupError as exc:
        return str(exc)
    return None


@dataclass
class _GameFile:
    """One file of ``games_dir`` as read: its game, or the problems that leave it out."""

    file: str
    game_id: str | None
    game: GameConfig | None
    problems: list[str]


def game_files(folder: Path) -> list[Path]:
    """The game files in ``folder``, in name order: every ``*.toml`` but hidden ones (an
    editor's ``.#name.toml`` lock, ``.name.toml.swp``); backups (``name.toml~``) do not
    end in .toml. OSError when the folder cannot be listed."""
    with os.scandir(folder) as entries:
        names = [
            entry.name
            for entry in entries
            if entry.name.endswith(".toml")
            and not entry.name.startswith(".")
            and not entry.is_dir()
        ]
    return [folder / file_name for file_name in sorted(names)]


def game_table(raw: Mapping[str, Any]) -> dict[str, Any] | None:
    """The game a game file holds: its top-level keys, or its one ``[[games]]`` table;
    None for a file of several ``[[games]]``."""
    games = raw.get("games")
    if set(raw) == {"games"} and isinstance(games, list):  # written as [[games]]
        if len(games) == 1 and isinstance(games[0], dict):
            return games[0]
        return None
    return dict(raw)


def _read_game_file(
    file: Path, label: str, base: Path, default_tz: object, boards: _Boards
) -> _GameFile:
    """One game file: the keys of one ``[[games]]`` table at its top (or one ``[[games]]``
    table); its problems are named ``games.d/club-7.toml: players[2].email: ...``."""
    try:
        raw: dict[str, Any] = tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        return _GameFile(label, None, None, [f"{label}: cannot read: {exc.strerror or exc}"])
    except UnicodeDecodeError:
        return _GameFile(label, None, None, [f"{label}: not UTF-8 text"])
    except tomllib.TOMLDecodeError as exc:
        return _GameFile(label, None, None, [f"{label}: not valid TOML: {exc}"])
    table = game_table(raw)
    if table is None:
        return _GameFile(
            label,
            None,
            None,
            [
                f"{label}: games: a game file holds one game: write its keys at the top "
                "of the file (id = ..., board = ...), or in one [[games]] table"
            ],
        )
    raw = table
    given = raw.get("id")
    game_id = given if isinstance(given, str) and _GAME_ID.match(given) else None
    problems: list[str] = []
    settings: GameSettings | None = None
    try:
        settings = GameSettings.model_validate(raw)
    except ValidationError as exc:
        problems.extend(_describe(label, exc))
    parts = _game_parts(raw, base, default_tz, label, "", problems, boards)
    if settings is not None and parts is not None:
        problem = _ruleset_problem(settings, parts[0])
        if problem is not None:
            problems.append(f"{label}: {problem}")
    if problems or settings is None or parts is None:
        return _GameFile(label, game_id, None, problems)
    game = GameConfig(settings, *parts, file=label, where=f"{label}: ")
    return _GameFile(label, game_id, game, [])


def _no_id_twice(read: list[_GameFile], main_ids: Mapping[str, int], name: str) -> None:
    """A game id given by two files (or by a game file and the config file) is a problem
    of each game file giving it, naming the others: none of them is used."""
    holders: dict[str, list[str]] = {}
    for game_file in read:
        if game_file.game_id is not None:
            holders.setdefault(game_file.game_id, []).append(game_file.file)
    for game_file in read:
        if game_file.game_id is None:
            continue
        others = [f for f in holders[game_file.game_id] if f != game_file.file]
        if game_file.game_id in main_ids:
            others.insert(0, f"{name} (games[{main_ids[game_file.game_id]}])")
        if others:
            game_file.problems.append(
                f"{game_file.file}: id: {game_file.game_id!r} is also the id of the game in "
                f"{' and '.join(others)}: a game id names one game; change one of them"
            )
            game_file.game = None


def without_password(section: str) -> str:
    """The other fix for a password that is missing: a setup that needs none."""
    if section == "smtp":
        return (
            "; or, for a relay that takes mail without a password, remove username and "
            "password_file from [mail.smtp]"
        )
    return "; or, for a server that gets its mail over LMTP only, remove [mail.imap]"


def password_file_problem(file: Path, base: Path, section: str | None = None) -> str | None:
    """Why the password in ``file`` (as ``secret_file`` finds it) cannot be read, or None;
    for a file that does not exist, with the fix that needs no password for ``section``
    ("imap" or "smtp") when given."""
    found = secret_file(file, base)
    try:
        if not found.read_text(encoding="utf-8").strip():
            return f"{found} is empty"
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        where = os.environ.get(ENV_CREDENTIALS)
        also = (
            f" (and the service has no credential {str(file)!r} in ${ENV_CREDENTIALS} {where})"
            if where and not file.is_absolute()
            else ""
        )
        missing = isinstance(exc, FileNotFoundError)
        fix = without_password(section) if missing and section is not None else ""
        return f"cannot read {found}: {reason}{also}{fix}"
    return None


def _describe(name: str, exc: ValidationError) -> list[str]:
    lines = []
    for error in exc.errors(include_url=False):
        key = _key_path(error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "missing":
            message = "missing (this key is required)"
        elif error["type"] == "extra_forbidden":
            message = "unknown key (check the spelling; see deploy/config.example.toml)"
        elif error["type"] not in ("value_error", "assertion_error"):
            message = f"{message} (got {error['input']!r})"
        named = re.match(r"^([a-z_]+): ", message)
        if named and key and error["type"] == "value_error":  # a table's check naming its key
            key, message = f"{key}.{named.group(1)}", message[named.end() :]
        lines.append(f"{name}: {key}: {message}" if key else f"{name}: {message}")
    return lines


def _key_path(loc: Iterable[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("str", "datetime", "dict[str,any]", "list[union[str,datetime]]"):
            continue  # a union member's tag, not a key
        else:
            out += f".{part}" if out else str(part)
    return out


def _board_table(spec: str | dict[str, Any], base: Path, where: str) -> Mapping[str, Any]:
    """A game's [board] table: inline, from a file (relative to the config), or a bundled
    board by name (``snl_pbem.boards``; a file of the same name wins)."""
    if isinstance(spec, dict):
        return spec
    try:
        found = locate(spec, base)
    except UnknownBoard as exc:
        raise ConfigError([f"{where}: {exc}"]) from None
    if isinstance(found, str):
        return bundled_table(found)
    file = found
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(
            [f"{where}: cannot read board file {file}: {exc.strerror or exc}"]
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{where}: board file {file} is not valid TOML: {exc}"]) from None
    table = data.get("board", data)
    if not isinstance(table, dict):
        raise ConfigError([f"{where}: board file {file} holds no [board] table"])
    return table


def _schedule(game: Mapping[str, Any], default_tz: object) -> Schedule:
    """The schedule of a raw game table; ValueError starting with the key at fault."""
    try:
        tz = zone(str(game.get("timezone") or default_tz))
    except ValueError as exc:
        raise ValueError(f"timezone: {exc}") from None
    if "first_deadline" not in game:
        raise ValueError("first_deadline: missing (this key is required)")
    try:
        first = parse_time(game["first_deadline"], tz)
    except ValueError as exc:
        raise ValueError(f"first_deadline: {exc}") from None
    explicit = []
    listed = game.get("deadlines") or []
    for i, value in enumerate(listed if isinstance(listed, list) else []):
        try:
            explicit.append(parse_time(value, tz))
        except ValueError as exc:
            raise ValueError(f"deadlines[{i}]: {exc}") from None
    previous = first
    for i, moment in enumerate(explicit):
        if moment <= previous:
            raise ValueError(f"deadlines[{i}]: must be later than the deadline before it")
        previous = moment
    length = None
    if game.get("round_length") is not None:
        try:
            length = _positive_duration(game["round_length"])
        except ValueError as exc:
            raise ValueError(f"round_length: {exc}") from None
    elif not explicit:
        raise ValueError("round_length: missing (give round_length, or deadlines)")
    return Schedule(tz, first, length, tuple(explicit))


def _database_url(url: str, base: Path) -> str:
    prefix = "sqlite:///"
    if url.startswith(prefix) and url != "sqlite:///:memory:":
        path = Path(url[len(prefix) :])
        if not path.is_absolute():
            return prefix + str((base / path).resolve())
    return url
