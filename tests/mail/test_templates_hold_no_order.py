"""No message we send holds a complete order (issue 20), by construction.

An out-of-office reply without auto-reply headers pasted bob's welcome whole, unquoted,
and its example (``KEY`` with his live key, ``DICE 4``, ``TRAPDOOR 12``) became his
orders. So a mail that gives a key gives it in a sentence ("Your order key is ..."), a
code mail its code likewise ("Your confirmation code is ..."), and every example block
says ``KEY (your order key)`` and ``CONFIRM (your code)``: a copy of any of our mail,
pasted back from the very address it went to, authenticates nothing and confirms nothing.

The test renders every template under ``templates/`` (both rulesets, the player's and
the referee's) by running the real flows of a server on SQLite: games started, orders,
STATUS, HELP, LIST, sign-ups with their codes, observers, ABSENT, RESIGN, NEW KEY,
ADDRESS, reminders, the referee's commands by mail (and refused ones), key guessing, a
held round, rounds closed to the end of both games, a delivery failure and a bounce.
Every message the outbox is given is caught as it is composed, and each is checked: its
text read as commands gives no live key and no live code; a key appears only in the
sentence of the mails meant to give it; and the text pasted back whole by its recipient
(alone, and under an out-of-office note), on a copy of the database as it stood when the
mail was sent, stores no orders, changes nothing, and keeps no key in clear. The union of
the templates reached must be every template file, so a new one cannot escape the test.
"""

from __future__ import annotations

import email
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from mailhelpers import code_in, key_in, mail_to, orders_of
from sqlalchemy import delete, select

from snl_pbem.app import outbox as outbox_module
from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.intake import authenticate as intake_module
from snl_pbem.app.intake import ingest
from snl_pbem.app.outbox import drain_outbox
from snl_pbem.app.reopened import notify_restored
from snl_pbem.app.rounds import rollback_round
from snl_pbem.app.schedule import hold_round, send_reminders
from snl_pbem.config import Config, load_config
from snl_pbem.i18n import catalog
from snl_pbem.mail.commands import parse_commands
from snl_pbem.mail.parse import keys_quoted_in, order_key_given
from snl_pbem.mail.smtp import SendError
from snl_pbem.store import (
    Confirmation,
    Database,
    Game,
    InboundMessage,
    Observer,
    OrderRecord,
    OutboxMessage,
    Player,
    Round,
    RoundTally,
    ServerKey,
    Signup,
)
from snl_pbem.store.migrate import upgrade

T0 = datetime(2029, 12, 1, 12, 0, tzinfo=UTC)
REFEREE_KEY = "ref-key-0123456789"
CONFIG_KEYS = ("ann-key-123", "bob-key-123", "cy-key-123", "dan-key-123", "eve-key-123")
CONFIG = """
timezone = "UTC"
[database]
url = "{url}"
[mail]
address = "snl@example.org"
referee = "ref@example.org"
referee_key = "{referee_key}"
replies_per_hour = 1000

[[games]]
id = "g1"
title = "Postal test"
language = "{language}"
board = {{ rows = 2, columns = 5 }}
reveal_after_game = true
first_deadline = "2029-12-04T18:00"
round_length = "3d"
signup = "open"
max_absence = "10d"
players = [
  {{ name = "ann", email = "ann@example.org", key = "ann-key-123" }},
  {{ name = "bob", email = "bob@example.org", key = "bob-key-123" }},
  {{ name = "cy", email = "cy@example.org", key = "cy-key-123" }},
]

[[games]]
id = "c1"
ruleset = "classic"
language = "{language}"
board = {{ rows = 2, columns = 6, ladders = {{ "3" = 8 }}, snakes = {{ "11" = 2 }} }}
first_deadline = "2029-12-04T18:00"
round_length = "1d"
close_when_all_in = true
players = [
  {{ name = "dan", email = "dan@example.org", key = "dan-key-123" }},
  {{ name = "eve", email = "eve@example.org", key = "eve-key-123" }},
]

[[games]]
id = "open4"
title = "Open game"
language = "{language}"
board = "standard"
first_deadline = "2029-12-04T18:00"
round_length = "3d"
signup = "open"
min_players = 2
max_players = 2
starts = "when_full"

[[games]]
id = "appr"
language = "{language}"
board = "standard"
first_deadline = "2029-12-04T18:00"
round_length = "3d"
signup = "approval"
max_players = 4
"""

KEY_GIVERS = {"postal/welcome.txt.j2", "classic/welcome.txt.j2", "player/seat.txt.j2"}
KEY_GIVERS |= {"player/new_key.txt.j2"}
"""The templates whose mail gives an order key (in its sentence, once)."""
PLACEHOLDERS = ("(your order key)", "(your referee key)")
"""How every KEY line of our mail goes on after ``KEY`` (a description may follow, in a
list), in the mail's language."""


def words(sent: Sent, msgid: str) -> str:
    """``msgid`` as the mail ``sent`` says it: in its ``Content-Language``."""
    code = email.message_from_bytes(sent.raw)["Content-Language"] or "en"
    translations = catalog(code)
    return translations.gettext(msgid) if translations is not None else msgid


WATCHED = (OrderRecord, Player, Signup, Observer, Confirmation, Game, Round, RoundTally, ServerKey)
"""What a message can change when it is obeyed: a pasted copy of our mail must change none."""


def template_files() -> set[str]:
    """Every mail template (the game pages' HTML ones, templates/web/, are no mail)."""
    folder = Path(str(resources.files("snl_pbem.templates")))
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*.txt.j2")}


def included(names: set[str]) -> set[str]:
    """The templates that ``names`` pull in with ``{% include %}`` (the commands list)."""
    folder = Path(str(resources.files("snl_pbem.templates")))
    found: set[str] = set()
    for name in names:
        found.update(re.findall(r'{%-?\s*include\s+"([^"]+)"', (folder / name).read_text()))
    return found


@dataclass
class Sent:
    """One message given to the outbox, as the recipient reads it."""

    template: str
    to: str
    subject: str
    body: str
    raw: bytes
    from_paste: bool
    """Sent in answer to one of the pasted copies (checked, not pasted again)."""


@dataclass
class Outbox:
    """Every message composed, in order, with the template it was rendered from."""

    sent: list[Sent] = field(default_factory=list)
    pasting: bool = False
    template: str = ""


@pytest.fixture
def outbox(monkeypatch: pytest.MonkeyPatch) -> Outbox:
    """Catch each message as ``enqueue_mail`` renders and composes it (it does both, in
    that order, for every message the server sends)."""
    caught = Outbox()
    render, compose = outbox_module.render, outbox_module.compose

    def rendering(template: str, /, **context: Any) -> tuple[str, str]:
        caught.template = template
        return render(template, **context)

    def composing(**kwargs: Any) -> bytes:
        raw = compose(**kwargs)
        caught.sent.append(
            Sent(
                caught.template,
                kwargs["to"],
                kwargs["subject"],
                kwargs["body"],
                raw,
                caught.pasting,
            )
        )
        return raw

    monkeypatch.setattr(outbox_module, "render", rendering)
    monkeypatch.setattr(outbox_module, "compose", composing)
    return caught


def plain(sender: str, body: str, tag: str, subject: str = "orders") -> bytes:
    """A plain-text message as Thunderbird writes one."""
    return (
        f"From: {sender}\r\nTo: snl@example.org\r\nSubject: {subject}\r\n"
        f"Date: Sat, 01 Dec 2029 12:00:00 +0000\r\nMessage-ID: <{tag}@example.org>\r\n"
        "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=UTF-8\r\n"
        "Content-Transfer-Encoding: 8bit\r\n\r\n" + body.replace("\n", "\r\n") + "\r\n"
    ).encode()


AWAY = "I am out of the office until 4 January, and read no mail until then.\n\n"


def pasted(sent: Sent, tag: str, away: bool) -> bytes:
    """Our message pasted back whole and unquoted by its recipient, without auto-reply
    headers: alone, or under an out-of-office note (as bob's mail program did)."""
    return plain(sent.to, (AWAY if away else "") + sent.body, tag, f"Re: {sent.subject}")


def state(db: Database) -> dict[str, list[tuple[Any, ...]]]:
    with db.transaction() as s:
        return {
            m.__tablename__: sorted(map(tuple, s.execute(select(m.__table__)).all()), key=repr)
            for m in WATCHED
        }


class Server:
    """A server's database driven through its real flows, one clock, one message each."""

    def __init__(self, tmp_path: Path, caught: Outbox, language: str = "en") -> None:
        self.tmp_path, self.caught = tmp_path, caught
        self.path = tmp_path / "snl.db"
        self.db = Database(f"sqlite:///{self.path}")
        upgrade(self.db)
        config_path = tmp_path / "config.toml"
        config_path.write_text(
            CONFIG.format(url=self.db.url, referee_key=REFEREE_KEY, language=language)
        )
        self.config: Config = load_config(config_path)
        self.now, self.n, self.checked, self.pastes = T0, 0, 0, 0
        self.keys: set[str] = {k.lower() for k in (*CONFIG_KEYS, REFEREE_KEY)}
        self.codes: set[str] = set()
        sync_games(self.db, self.config, self.now)

    def tick(self, **kwargs: float) -> datetime:
        self.now += timedelta(**kwargs) if kwargs else timedelta(seconds=30)
        return self.now

    def send(self, sender: str, body: str, subject: str = "orders") -> str:
        self.n += 1
        result = ingest(
            self.db, self.config, plain(sender, body, f"m{self.n}", subject), self.tick(), "t"
        )
        return f"{result.status}: {result.detail}"

    def referee(self, *lines: str, key: str = REFEREE_KEY, sender: str = "ref@example.org") -> str:
        return self.send(sender, "\n".join((f"KEY {key}", *lines)), "commands")

    def last(self, who: str, template: str) -> str:
        return next(
            s.body for s in reversed(self.caught.sent) if s.to == who and s.template == template
        )

    def join(self, who: str, game: str, name: str) -> str:
        self.send(who, f"JOIN {game} {name}")
        return self.confirm(who)

    def confirm(self, who: str, keyed: str = "") -> str:
        """CONFIRM the code last mailed to ``who``, once its mail was pasted back while
        the code was still good."""
        self.check()
        code = code_in(self.last(who, "player/code.txt.j2"))
        return self.send(who, f"{keyed}CONFIRM {code}")

    # -- the checks ---------------------------------------------------------------------

    def check(self) -> None:
        """Check every message composed since the last check, and paste back each one
        the flows sent (not the answers to pastes) on a copy of the database as it is."""
        new = self.caught.sent[self.checked :]
        self.checked = len(self.caught.sent)
        for sent in new:  # first learn every secret given, then judge
            if sent.template in KEY_GIVERS:
                self.keys.add(key_in(sent.body).lower())
            if sent.template == "player/code.txt.j2":
                self.codes.add(code_in(sent.body).replace("-", "").lower())
        for sent in new:
            self.static_check(sent)
        flows = [s for s in new if not s.from_paste]
        if flows:
            self.paste_back(flows)

    def static_check(self, sent: Sent) -> None:
        what = f"{sent.template} to {sent.to}"
        commands = parse_commands(sent.body, f"Re: {sent.subject}")
        keys = {k.lower() for k in commands.order_keys}
        assert not keys & self.keys, f"{what} holds a KEY line with a live key"
        for action in commands.actions:
            assert not (action.word == "CONFIRM" and action.args[0] in self.codes), what
        for line in sent.body.splitlines():
            # an example says KEY (your order key); prose may start a line with "key" (a
            # wrapped sentence), but never so that it reads as a KEY line, even a wrong one
            if re.match(r"\s*(KEY|PASSWORD)\b", line):
                example = line.strip()
                starts = [f"KEY {words(sent, p)}" for p in PLACEHOLDERS]
                assert any(example.startswith(p) for p in starts), f"{what}: {line!r}"
            assert parse_commands(line).order_key is None, f"{what}: {line!r}"
        lowered = sent.body.lower()
        codes = [c for c in self.codes if c in lowered.replace("-", "")]
        if sent.template == "player/code.txt.j2":
            code = code_in(sent.body)
            assert codes == [code.replace("-", "").lower()], what  # its own code, once
            [line] = [x for x in sent.body.splitlines() if code in x]
            assert line == words(sent, "Your confirmation code is %(code)s") % {"code": code}
        else:
            assert codes == [], f"{what} shows a code"
        shown = [k for k in self.keys if k in lowered]
        if sent.template in KEY_GIVERS:
            key = key_in(sent.body)
            assert shown == [key.lower()], what  # its own key, and no other
            [line] = [x for x in sent.body.splitlines() if key in x]
            assert line == words(sent, "Your order key is %(key)s") % {"key": key}, what
        else:
            assert shown == [], f"{what} shows a key"

    def paste_back(self, flows: list[Sent]) -> None:
        """Each message pasted back by its recipient into a copy of the database as it is
        now: first under an out-of-office note, to the whole server; then, with the
        outbox emptied so that the server cannot know the text as its own (the other
        defence, snl_pbem.mail.ours), alone and under the note again: by construction."""
        copy_path = self.tmp_path / f"copy{self.checked}.db"
        source, target = sqlite3.connect(self.path), sqlite3.connect(copy_path)
        with target:
            source.backup(target)
        source.close(), target.close()
        copy = Database(f"sqlite:///{copy_path}")
        self.caught.pasting = True
        try:
            for sent in flows:
                self.paste(copy, sent, away=True)
            with copy.transaction() as s:
                s.execute(delete(OutboxMessage))
            for sent in flows:
                self.paste(copy, sent, away=False)
                self.paste(copy, sent, away=True)
        finally:
            self.caught.pasting = False
            copy.dispose()

    def paste(self, copy: Database, sent: Sent, away: bool) -> None:
        self.pastes += 1
        before = state(copy)
        raw = pasted(sent, f"p{self.pastes}", away)
        result = ingest(copy, self.config, raw, self.now, "t")
        what = f"{sent.template} to {sent.to} pasted back ({result.detail})"
        assert state(copy) == before, what  # no orders, nothing obeyed
        with copy.transaction() as s:
            row = s.get(InboundMessage, result.inbound_id)
            assert row is not None and row.player_id is None, what  # no key worked
            kept = row.raw.lower()
        assert not [k for k in self.keys if k.encode() in kept], what  # none kept in clear


@pytest.fixture(params=["en", "zh-Hans", "th"])
def server(tmp_path: Path, outbox: Outbox, request: pytest.FixtureRequest) -> Iterator[Server]:
    """The flows in each language (every game's players' mail in it): a translated
    example must authenticate and confirm nothing either (``KEY (你的口令)`` is one word)."""
    running = Server(tmp_path, outbox, request.param)
    yield running
    running.db.dispose()


class Refusing:
    """An SMTP server that takes every message but refuses one address for good."""

    def __init__(self, refused: str) -> None:
        self.refused = refused

    def send(self, recipient: str, message: bytes) -> None:
        if recipient == self.refused:
            raise SendError(
                "550 5.1.1 <x3@example.net>: Recipient address rejected", permanent=True
            )


def bounce_of(welcome: Sent, message_id: str) -> bytes:
    """Postfix returning a welcome whole (quoted-printable, as we sent it)."""
    returned = welcome.raw.split(b"\r\n\r\n", 1)
    assert message_id.encode() in returned[0]
    return (
        b"From: MAILER-DAEMON@mx.example.net (Mail Delivery System)\r\n"
        b"To: snl@example.org\r\nSubject: Undelivered Mail Returned to Sender\r\n"
        b"Message-ID: <dsn-1@mx.example.net>\r\nAuto-Submitted: auto-replied\r\n"
        b"MIME-Version: 1.0\r\n"
        b'Content-Type: multipart/report; report-type=delivery-status; boundary="B"\r\n\r\n'
        b"--B\r\nContent-Type: text/plain\r\n\r\nYour message could not be delivered.\r\n"
        b"--B\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mx\r\n\r\n"
        b"Final-Recipient: rfc822; " + welcome.to.encode() + b"\r\nAction: failed\r\n"
        b"Status: 5.1.1\r\nDiagnostic-Code: smtp; 550 5.1.1 User unknown\r\n\r\n"
        b"--B\r\nContent-Type: message/rfc822\r\n\r\n" + welcome.raw + b"\r\n--B--\r\n"
    )


def test_no_mail_we_send_holds_a_complete_order(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = server
    # the games start: welcomes with keys set in the config
    start_game(s.db, s.config, "g1", s.now)
    start_game(s.db, s.config, "c1", s.now)
    s.check()

    # orders, STATUS, HELP (a player's and a guest's), wrong keys, no game, LIST
    assert s.send("ann@example.org", "GAME g1\nKEY ann-key-123\nDICE 6\nTRAPDOOR 7").startswith(
        "processed"
    )
    s.send("ann@example.org", "GAME g1\nKEY ann-key-123\nDICE 6\nTRAPDOOR 7\nKey point: thanks")
    s.send("dan@example.org", "GAME c1\nKEY dan-key-123\nROLL")
    s.send("bob@example.org", "GAME g1\nKEY bob-key-123\nSTATUS")
    s.send("eve@example.org", "GAME c1\nKEY eve-key-123\nSTATUS")
    s.send("bob@example.org", "GAME g1\nKEY bob-key-123\nHELP")
    s.send("guest@example.net", "HELP")
    s.send("guest2@example.net", "GAME c1\nHELP")
    s.send("cy@example.org", "GAME g1\nKEY cy-wrong-key-9\nDICE 2")
    s.send("guest@example.net", "DICE 3")
    s.send("guest@example.net", "LIST")
    s.check()

    # sign-ups: two seats fill open4 and start it (generated keys), a third waits on
    # standby; a sign-up for appr waits for the referee
    s.join("x1@example.net", "open4", "Xavier")
    assert "the game started" in s.join("x2@example.net", "open4", "Yves")
    s.join("x3@example.net", "open4", "Zoe")
    s.join("y1@example.net", "appr", "Yo")
    s.check()

    # an observer; ABSENT, RESIGN (asked to confirm), NEW KEY, HISTORY, a moved address
    s.send("obs@example.net", "OBSERVE g1")
    s.confirm("obs@example.net")
    s.send("ann@example.org", "GAME g1\nKEY ann-key-123\nABSENT UNTIL 2029-12-06")
    s.send("cy@example.org", "GAME g1\nKEY cy-key-123\nRESIGN")
    assert "new key sent" in s.send("bob@example.org", "GAME g1\nKEY bob-key-123\nNEW KEY")
    bob_key = key_in(s.last("bob@example.org", "player/new_key.txt.j2"))
    s.send("ann@example.org", "GAME g1\nKEY ann-key-123\nHISTORY")
    s.send("ann@example.org", "GAME g1\nKEY ann-key-123\nADDRESS ann@new.example")
    s.confirm("ann@new.example", keyed="GAME g1\nKEY ann-key-123\n")
    s.check()

    # reminders, a held round, key guessing
    assert send_reminders(s.db, s.config, "g1", 1, s.tick()) > 0
    assert send_reminders(s.db, s.config, "c1", 1, s.tick()) > 0
    assert hold_round(
        s.db, s.config, "open4", 1, "IMAP: login failed", s.tick(), timedelta(hours=1)
    )
    monkeypatch.setattr(intake_module, "WRONG_KEYS_PER_GAME_PER_HOUR", 1)
    s.send("bob@example.org", "GAME g1\nKEY not-his-key-1\nSTATUS")
    s.send("mallory@example.net", "GAME g1\nKEY guessed-key-2\nDICE 1")
    s.check()

    # the referee by mail: STATUS, HELP, deadlines moved, a sign-up refused, a seat
    # given to another address; then a command without the key, and the key from a
    # stranger's address (refused, each told to the referee)
    s.referee("STATUS", "HELP")
    s.referee("EXTEND g1 BY 1d")
    s.referee("PAUSE g1")
    s.referee("RESUME g1")
    s.referee("REFUSE appr Yo")
    s.referee("REPLACE g1 cy dora@example.net")
    s.join("y2@example.net", "appr", "Zed")  # a seat given away before the start
    s.referee("APPROVE appr Zed")
    s.referee("REPLACE appr Zed zoe@example.net")
    s.check()
    s.send("ref@example.org", "STATUS", "commands")
    s.tick(hours=2)
    s.referee("STATUS", sender="mallory@example.net")
    s.check()

    # rounds closed to the end of both games: reports, the referee's summary, the
    # observer's report, the early-close notice, game over (the postal board revealed)
    s.referee("CLOSE ROUND g1")
    s.send("ann@new.example", "GAME g1\nKEY ann-key-123\nHISTORY")
    s.send("ann@new.example", "GAME g1\nKEY ann-key-123\nDICE 5")
    s.send("bob@example.org", f"GAME g1\nKEY {bob_key}\nDICE 6")
    s.referee("CLOSE ROUND g1")
    s.check()
    # the last round rolled back (each player told, their own orders restated) and closed
    # again; then the players told of a restore from a backup (issue 21). The game is
    # over and its reveal out: by mail that is refused, so as on the server, --force
    s.referee("ROLLBACK g1")
    rollback_round(s.db, "g1", s.tick(), force=True, via="cli", config=s.config)
    s.referee("CLOSE ROUND g1")
    assert notify_restored(s.db, s.config, s.tick()).games
    s.check()
    for _ in range(30):
        with s.db.transaction() as session:
            if session.scalar(select(Game.state).where(Game.name == "c1")) != "running":
                break
        s.send("dan@example.org", "GAME c1\nKEY dan-key-123\nROLL")
        s.referee("CLOSE ROUND c1")
        s.check()
    templates = {sent.template for sent in s.caught.sent}
    assert {"postal/game_over.txt.j2", "classic/game_over.txt.j2"} <= templates

    # everything sent, one address refusing it for good: the referee is told; then a
    # welcome comes back bounced, holding its key: the referee is told, and the stored
    # bounce keeps no key
    drain_outbox(s.db, s.config, Refusing("x3@example.net"), s.tick, worker="t")  # type: ignore[arg-type]
    [welcome] = [
        x
        for x in s.caught.sent
        if x.template == "postal/welcome.txt.j2" and x.to == "x1@example.net"
    ]
    with s.db.transaction() as session:
        message_id = session.scalars(
            select(OutboxMessage.message_id).where(
                OutboxMessage.kind == "welcome", OutboxMessage.recipient == "x1@example.net"
            )
        ).one()
    result = ingest(s.db, s.config, bounce_of(welcome, message_id), s.tick(), "t")
    assert result.status == "ignored" and result.detail.startswith("bounce of outbox")
    with s.db.transaction() as session:
        kept = session.get(InboundMessage, result.inbound_id).raw
    assert key_in(welcome.body).encode() not in kept and b"Final-Recipient" in kept
    s.check()

    reached = {sent.template for sent in s.caught.sent}
    reached |= included(reached)
    assert template_files() - reached == set(), "templates no flow here sends"
    flows = [x for x in s.caught.sent if not x.from_paste]
    assert len(flows) > 80 and s.pastes == 3 * len(flows)  # every flow's message, three times


# -- the issue's own cases, on the fixtures' game g1 (ann, bob and cy; keys in the config)


def away(sender: str, text: str, subject: str, tag: str) -> bytes:
    """An out-of-office reply with no auto-reply header, pasting a message whole."""
    return plain(sender, AWAY + text, tag, f"Re: {subject}")


def welcome_of(db: Database, who: str) -> tuple[str, str]:
    """(subject, text) of the welcome mailed to ``who``."""
    [raw] = mail_to(db, who, "welcome")
    subject = re.search(r"^Subject: (.*)$", raw, re.M)
    assert subject is not None
    return subject.group(1).strip(), raw.split("\r\n\r\n", 1)[1]


def test_an_out_of_office_pasting_the_welcome_is_not_orders(sqlite_intake) -> None:
    """bob sent DICE 3; his out-of-office then pasted his welcome whole, its example
    and all. His orders stay DICE 3, and the stored copy keeps no key."""
    from mailhelpers import T0 as now

    db, config = sqlite_intake
    subject, text = welcome_of(db, "bob@example.org")
    assert order_key_given(text) == "bob-key-123" and "KEY (your order key)" in text
    assert "\r\nDICE 4\r\nTRAPDOOR 12\r\n" in text  # the example that was applied
    ingest(db, config, plain("bob@example.org", "GAME g1\nKEY bob-key-123\nDICE 3", "b1"), now, "t")
    result = ingest(db, config, away("bob@example.org", text, subject, "b2"), now, "t")
    assert result.status == "rejected", result.detail
    assert [(o.player, o.dice, o.nomination) for o in orders_of(db)] == [("bob", "3", None)]
    with db.transaction() as s:
        assert b"bob-key-123" not in s.get(InboundMessage, result.inbound_id).raw.lower()


def test_orders_above_a_pasted_welcome_echo_no_key(sqlite_intake) -> None:
    """ann writes her orders above her welcome, pasted unmarked: her own lines count, and
    the answer, which lists the lines it did not obey, shows her key nowhere."""
    from mailhelpers import T0 as now

    db, config = sqlite_intake
    subject, text = welcome_of(db, "ann@example.org")
    body = "GAME g1\nKEY ann-key-123\nDICE 3\n\n" + text
    result = ingest(db, config, plain("ann@example.org", body, "a1", f"Re: {subject}"), now, "t")
    assert result.status == "processed", result.detail
    assert [(o.player, o.dice) for o in orders_of(db)] == [("ann", "3")]
    [ack] = mail_to(db, "ann@example.org", "ack")
    assert "ann-key-123" not in ack.lower()


def test_a_bounced_welcome_with_a_key_from_the_config_keeps_no_key(sqlite_intake) -> None:
    """A key set in the config has no generated shape: the welcome's sentence is what
    finds it in a returned copy, and the stored bounce has it redacted."""
    from mailhelpers import T0 as now

    db, config = sqlite_intake
    with db.transaction() as s:
        row = s.scalars(
            select(OutboxMessage).where(OutboxMessage.recipient == "cy@example.org")
        ).one()
        message_id, raw = row.message_id, row.message
    welcome = Sent("postal/welcome.txt.j2", "cy@example.org", "", "", raw, False)
    bounce = bounce_of(welcome, message_id)
    assert "cy-key-123" in keys_quoted_in(email.message_from_bytes(bounce))
    result = ingest(db, config, bounce, now, "t")
    assert result.status == "ignored", result.detail
    with db.transaction() as s:
        kept = s.get(InboundMessage, result.inbound_id).raw
    assert b"cy-key-123" not in kept.lower() and b"Final-Recipient: rfc822; cy@" in kept
