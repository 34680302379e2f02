"""For every mail the server sends, and every way a client quotes, pastes or auto-replies with
it, nothing in the quoted text counts: the orders the player wrote fresh are what is read,
and a message made only of our text applies nothing (issue 20, "We know what we sent").

The mails are the server's own, rendered as the app renders them: a game of each ruleset is
played on SQLite through ``ingest`` (welcomes, acknowledgements, notices, STATUS, HELP,
reminders, LIST, HISTORY, membership and code mails, a moved deadline, round reports, an
observer's report, the referee's summary, the new-key mail; the classic game to its end).
Each reply is read by ``parse_message`` with what the intake would pass it: the
fingerprints of the mail sent to its sender, newest first, scrubbed ones as scrubbed."""

from __future__ import annotations

import email
from dataclasses import dataclass
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mailhelpers import OPENED, T0, code_in, game_config, key_in, orders_of
from sqlalchemy import select

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.intake import SENT_COMPARED, ingest
from snl_pbem.app.intake import reading as intake_module
from snl_pbem.app.outbox import SCRUBBED, drain_outbox
from snl_pbem.app.referee import extend
from snl_pbem.app.rounds import close_round
from snl_pbem.app.schedule import send_reminders
from snl_pbem.config import load_config
from snl_pbem.mail.commands import Commands
from snl_pbem.mail.ours import fingerprint, fingerprint_of_sent, scrubbed
from snl_pbem.mail.parse import parse_message
from snl_pbem.mail.smtp import SmtpConfig, SmtpSender
from snl_pbem.store import Database, Game, OutboxMessage
from snl_pbem.store.migrate import upgrade

PLAYERS = {"ann@example.org": "ann-key-123", "bob@example.org": "bob-key-123"}
CLASSIC = """
timezone = "UTC"
[database]
url = "{url}"
[mail]
address = "snl@example.org"
referee = "ref@example.org"
[[games]]
id = "c1"
ruleset = "classic"
board = {{ rows = 2, columns = 6, ladders = {{ "3" = 8 }}, snakes = {{ "11" = 2 }} }}
first_deadline = "2030-01-04T18:00"
round_length = "1d"
close_when_all_in = true
players = [
  {{ name = "ann", email = "ann@example.org", key = "ann-key-123" }},
  {{ name = "bob", email = "bob@example.org", key = "bob-key-123" }},
  {{ name = "cy", email = "cy@example.org", key = "cy-key-1234" }},
]
"""


@dataclass(frozen=True)
class Sent:
    """One mail of ours as its recipient's client shows it."""

    game: str
    ruleset: str
    kind: str
    recipient: str
    subject: str
    text: str
    sent: tuple[str, ...]
    """What the intake passes with a reply from the recipient: the fingerprints of every
    mail to them up to this one, newest first (a scrubbed one as kept once scrubbed)."""
    kept: str | None = None
    """The fingerprint written with it (its outbox row's)."""

    def __repr__(self) -> str:  # what hypothesis prints for a failing example
        return f"<{self.ruleset} {self.kind} to {self.recipient}>"


def shown(raw: bytes) -> str:
    msg = email.message_from_bytes(raw)
    part = next(p for p in msg.walk() if p.get_content_type() == "text/plain")
    return part.get_payload(decode=True).decode("utf-8")


def play(db: Database, config, game_name: str, ruleset: str) -> list[Sent]:
    """Play the game through the intake so that the server sends every kind of mail."""
    count = [0]

    def send(sender: str, body: str, at=T0) -> None:
        count[0] += 1
        raw = (
            f"From: {sender}\r\nTo: snl@example.org\r\nSubject: [{game_name}] orders\r\n"
            f"Message-ID: <c{count[0]}.{game_name}@example.org>\r\n\r\n{body}\r\n"
        ).encode()
        ingest(db, config, raw, at + timedelta(seconds=count[0]), "t")

    keyed = f"GAME {game_name}\nKEY bob-key-123\n"
    order = "ROLL" if ruleset == "classic" else "DICE 5\nDICE 4\nTRAPDOOR 30"
    send_reminders(db, config, game_name, 1, T0)
    send("bob@example.org", f"Hi\n{keyed}{order}\nDICE: x\nThanks")  # ack: replaced, ignored
    send("bob@example.org", keyed + "STATUS")
    send("bob@example.org", keyed + "HELP")
    send("bob@example.org", "HELP")  # the guests' help
    send("bob@example.org", keyed + "Hello there")  # a notice: no orders
    send("bob@example.org", f"GAME {game_name}\nKEY wrong-key-999\nDICE 4")  # a guest notice
    send("bob@example.org", "LIST")
    send("bob@example.org", keyed + "HISTORY")
    send("bob@example.org", keyed + "ABSENT UNTIL 2029-12-20")  # refused: too long
    send("bob@example.org", keyed + "ABSENT UNTIL 2029-12-05")
    send("bob@example.org", keyed + "ABSENT OFF")
    send("dan@example.org", f"JOIN {game_name} Dan")  # refused: no sign-ups by mail
    send("dan@example.org", f"OBSERVE {game_name}")
    with db.transaction() as s:
        code = code_in(
            shown(
                s.scalars(select(OutboxMessage).where(OutboxMessage.kind == "code")).one().message
            )
        )
    send("dan@example.org", f"CONFIRM {code}")
    extend(db, game_name, T0 + timedelta(minutes=5), config=config, by=timedelta(days=1))
    at = T0 + timedelta(hours=1)
    for _ in range(40):  # the classic game to its end; the postal one for two rounds
        if close_round(db, game_name, at, config=config) is None:
            break
        at += timedelta(hours=1)
        with db.transaction() as s:
            over = s.scalar(select(Game.state).where(Game.name == game_name)) == "over"
        if over or (ruleset == "postal" and at > T0 + timedelta(hours=2)):
            break
        for sender, key in PLAYERS.items():
            send(
                sender,
                f"GAME {game_name}\nKEY {key}\n{'ROLL' if ruleset == 'classic' else 'DICE 3'}",
                at,
            )
    later = at + timedelta(minutes=1)
    send("bob@example.org", keyed + "NEW KEY", later)
    send("ann@example.org", f"GAME {game_name}\nKEY ann-key-123\nADDRESS ann2@example.org", later)
    send("ann@example.org", f"GAME {game_name}\nKEY ann-key-123\nRESIGN", later)
    with db.transaction() as s:
        rows = list(s.scalars(select(OutboxMessage).order_by(OutboxMessage.id)))
        corpus, before = [], {}
        for row in rows:
            kept = scrubbed(row.message, SCRUBBED) if row.secret else row.message
            mine = before.setdefault(row.recipient, [])
            mine.insert(0, fingerprint_of_sent(kept, scrubbed=row.secret))
            subject = email.message_from_bytes(row.message)["Subject"]
            corpus.append(
                Sent(
                    game_name,
                    ruleset,
                    row.kind,
                    row.recipient,
                    str(subject),
                    shown(row.message),
                    tuple(mine[:40]),
                    row.fingerprint,
                )
            )
    return corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[Sent]:
    found = []
    for ruleset in ("postal", "classic"):
        folder = tmp_path_factory.mktemp(ruleset)
        db = Database(f"sqlite:///{folder / 'snl.db'}")
        upgrade(db)
        if ruleset == "postal":
            config = game_config(folder / "config.toml", db.url)
        else:
            (folder / "config.toml").write_text(CLASSIC.format(url=db.url))
            config = load_config(folder / "config.toml")
        game_name = "g1" if ruleset == "postal" else "c1"
        sync_games(db, config, T0)
        start_game(db, config, game_name, OPENED)
        found += play(db, config, game_name, ruleset)
        db.dispose()
    return found


def test_the_corpus_holds_every_kind_of_mail(corpus) -> None:
    kinds = {(m.ruleset, m.kind) for m in corpus}
    for ruleset in ("postal", "classic"):
        for kind in (
            "welcome", "ack", "notice", "status", "help", "guest-help", "guest-notice",
            "reminder", "list", "membership", "guest-reply", "code", "address-code",
            "deadline", "report", "observer-report", "referee-summary",
        ):  # fmt: skip
            assert (ruleset, kind) in kinds
    assert ("classic", "game-over") in kinds


def test_every_mail_we_write_keeps_the_fingerprint_of_what_it_says(corpus) -> None:
    """Every mail of every kind, broadcasts too, is written with the fingerprint its
    recipient's replies are compared with: the one read back from its bytes, as sent and
    once scrubbed (issue 23: worked out from the bytes at each reply, a long game's forty
    latest a player thrashed the fingerprints kept in memory)."""
    for sent in corpus:
        assert sent.kept, sent
        assert sent.sent[0] == sent.kept, sent  # as kept (scrubbed when it held a key)
    assert {m.kind for m in corpus} >= {"report", "welcome", "ack"}


# -- how clients quote, paste and auto-reply -------------------------------------------------

HEADER = "On Tue, 1 Dec 2026 at 12:00, Snakes and Ladders referee <snl@example.org> wrote:"
AWAY = (
    "Thank you for your message. I am out of the office until 4 January with limited "
    "access to email."
)


def outlook(mail: Sent) -> str:
    return (
        "________________________________\n"
        "From: Snakes and Ladders referee <snl@example.org>\n"
        "Sent: Tuesday, December 1, 2026 12:00 PM\n"
        f"To: {mail.recipient}\n"
        f"Subject: {mail.subject}\n\n"
    )


def paragraphs(text: str) -> list[str]:
    return [p for p in text.strip("\n").split("\n\n") if p.strip()]


def quoted(text: str, mark: str = "> ") -> str:
    return "\n".join((mark + line).rstrip() for line in text.strip("\n").split("\n"))


def reply(style: str, mail: Sent, fresh: str, at: int) -> str:
    """The body a client sends: ``fresh`` (the player's new lines, maybe none) with ``mail``
    quoted, pasted or auto-replied the way ``style`` says; ``at`` picks a paragraph."""
    ours = mail.text.strip("\n")
    parts = paragraphs(ours)
    cut = at % (len(parts) + 1)
    new = f"{fresh}\n\n" if fresh else ""
    if style == "top, quoted":
        return f"{new}{HEADER}\n{quoted(ours)}\n"
    if style == "bottom, quoted":
        return f"{HEADER}\n{quoted(ours)}\n\n{fresh}\n"
    if style == "between, quoted":
        above, below = "\n\n".join(parts[:cut]), "\n\n".join(parts[cut:])
        return f"{HEADER}\n{quoted(above)}\n\n{fresh}\n\n{quoted(below)}\n"
    if style == "nested quote":
        return f"{new}{HEADER}\n{quoted(quoted(ours), '>')}\n"
    if style == "top, pasted below":
        return f"{new}{ours}\n"
    if style == "bottom, pasted above":
        return f"{ours}\n\n{fresh}\n"
    if style == "between, pasted":
        return "\n\n".join([*parts[:cut], fresh, *parts[cut:]]) + "\n"
    if style == "out of office":
        return f"{new}{AWAY}\n\n{ours}\n"
    if style == "out of office, pasted first":
        return f"{AWAY}\n\n{ours}\n\n{fresh}\n"
    if style == "outlook":
        return f"{new}{outlook(mail)}{ours}\n"
    if style == "original message":
        return f"{new}-----Original Message-----\n{ours}\n"
    if style == "quoted with |":
        return f"{new}{HEADER}\n{quoted(ours, '| ')}\n"
    if style == "pasted, blank lines dropped":
        return new + "\n".join(line for line in ours.split("\n") if line.strip()) + "\n"
    if style == "outlook html text":  # an HTML part made text: lines spaced, indents gone
        return new + "\n\n".join(line.strip() for line in ours.split("\n") if line.strip()) + "\n"
    raise AssertionError(style)


STYLES = (
    "top, quoted",
    "bottom, quoted",
    "between, quoted",
    "nested quote",
    "top, pasted below",
    "bottom, pasted above",
    "between, pasted",
    "out of office",
    "out of office, pasted first",
    "outlook",
    "original message",
    "outlook html text",
    "quoted with |",
    "pasted, blank lines dropped",
)


def fresh_orders(mail: Sent, dice: tuple[int, ...], trapdoor: int | None, hello: bool) -> str:
    key = PLAYERS[mail.recipient]
    lines = ["Hi referee,"] if hello else []
    lines += [f"GAME {mail.game}", f"KEY {key}"]
    if mail.ruleset == "classic":
        lines.append("ROLL")
    else:
        lines.append("DICE " + " ".join(map(str, dice)))
        if trapdoor is not None:
            lines.append(f"TRAPDOOR {trapdoor}")
    return "\n".join(lines)


def read(mail: Sent, body: str) -> Commands:
    raw = (
        f"From: {mail.recipient}\r\nTo: snl@example.org\r\nSubject: Re: {mail.subject}\r\n"
        "Message-ID: <reply@example.org>\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
        + body.replace("\n", "\r\n")
    ).encode()
    parsed = parse_message(raw, "snl@example.org", mail.sent)
    assert parsed.commands is not None and parsed.automated is None
    return parsed.commands


def check_fresh(mail: Sent, commands: Commands, dice, trapdoor) -> None:
    """Exactly the fresh orders: nothing of ours added, replaced or refused."""
    assert commands.game == mail.game and not commands.game_from_subject
    assert commands.order_key == PLAYERS[mail.recipient]
    if mail.ruleset == "classic":
        assert commands.roll and commands.dice is None
    else:
        assert (commands.dice, commands.nomination) == (dice, trapdoor)
    assert commands.actions == () and not (commands.status or commands.help or commands.clear)
    assert commands.problems == () and commands.replaced == () and commands.conflict is None


def check_nothing(commands: Commands) -> None:
    """Our text alone: no orders, no key, no command of any kind."""
    assert not commands.has_orders and commands.order_key is None
    assert commands.actions == () and not (commands.status or commands.help or commands.clear)
    assert commands.game is None or commands.game_from_subject
    assert commands.problems == () and commands.replaced == ()


def test_every_mail_in_every_style(corpus) -> None:
    """Every kind of mail of each ruleset (the last of its kind to each kind of recipient)
    in every style, with fresh orders and without."""
    last = {(m.ruleset, m.kind, m.recipient in PLAYERS): m for m in corpus}
    for number, mail in enumerate(last.values()):
        for style in STYLES:
            check_nothing(read(mail, reply(style, mail, "", number)))
            if mail.recipient in PLAYERS:
                fresh = fresh_orders(mail, (2, 6), 37, hello=True)
                check_fresh(mail, read(mail, reply(style, mail, fresh, number)), (2, 6), 37)


@settings(max_examples=200)
@given(
    data=st.data(),
    style=st.sampled_from(STYLES),
    dice=st.lists(st.integers(1, 6), min_size=1, max_size=2).map(tuple),
    trapdoor=st.none() | st.integers(1, 99),
    hello=st.booleans(),
    at=st.integers(0, 50),
)
def test_whatever_the_orders_only_the_fresh_ones_count(
    corpus, data, style, dice, trapdoor, hello, at
) -> None:
    """The same, with the player's own orders drawn at random: the same values as our
    examples (DICE 4, TRAPDOOR 12) included."""
    mail = data.draw(st.sampled_from([m for m in corpus if m.recipient in PLAYERS]))
    fresh = fresh_orders(mail, dice, trapdoor, hello)
    check_fresh(mail, read(mail, reply(style, mail, fresh, at)), dice, trapdoor)


# -- through ingest, with the welcome sent and scrubbed, on SQLite and PostgreSQL ----------


def test_an_out_of_office_pasting_the_welcome_keeps_bobs_orders(intake, smtp_sink) -> None:
    """bob writes his key and DICE 3 on top; his out-of-office (no auto-reply headers, and a
    subject no list of auto-reply subjects knows) pastes our whole welcome below, unquoted.
    Only DICE 3 counts: the welcome's example is ours, though the database forgot the
    welcome's body (its key) when it was sent."""
    db, config = intake
    sender = SmtpSender(SmtpConfig(smtp_sink.host, smtp_sink.port, "none"), "snl@example.org")
    assert drain_outbox(db, config, sender, lambda: T0, worker="t").sent == 3
    sender.close()
    [delivered] = [m for m in smtp_sink.delivered if b"To: bob@example.org" in m.raw]
    welcome = shown(delivered.raw)
    key = key_in(welcome)
    with db.transaction() as s:
        kept = s.scalar(
            select(OutboxMessage.message).where(OutboxMessage.recipient == "bob@example.org")
        )
    assert key.encode() not in kept  # scrubbed
    body = f"KEY {key}\nDICE 3\n\n{AWAY}\n\n{welcome}".replace("\n", "\r\n")
    raw = (
        "From: bob@example.org\r\nTo: snl@example.org\r\nSubject: Re: [g1] Welcome\r\n"
        f"Message-ID: <away@example.org>\r\n\r\n{body}\r\n"
    ).encode()
    result = ingest(db, config, raw, T0, "t")
    assert result.status == "processed", result.detail
    [order] = orders_of(db)
    assert (order.player, order.dice, order.nomination) == ("bob", "3", None)
    # and our welcome alone, pasted by an out-of-office, applies nothing
    alone = f"{AWAY}\r\n\r\n{welcome}".replace("\n", "\r\n").replace("\r\r\n", "\r\n")
    raw = (
        "From: bob@example.org\r\nTo: snl@example.org\r\nSubject: Re: [g1] Welcome\r\n"
        f"Message-ID: <away2@example.org>\r\n\r\n{alone}\r\n"
    ).encode()
    assert ingest(db, config, raw, T0 + timedelta(seconds=1), "t").status in (
        "processed",
        "rejected",
    )
    assert len(orders_of(db)) == 1


def test_what_we_sent_is_the_latest_mail_and_every_mail_that_gave_a_key(intake) -> None:
    """The intake compares a message with the latest SENT_COMPARED mails to its sender that
    may have reached it (sent or about to be: not failed, not bounced), newest first, and
    with the mails that gave a key or code however old (the welcome)."""
    db, config = intake

    def body(i: int) -> bytes:
        return (
            f"From: snl@example.org\r\nTo: bob@example.org\r\nSubject: s{i}\r\n"
            f"Content-Type: text/plain; charset=utf-8\r\n\r\nHello bob,\r\nmail {i}\r\n"
        ).encode()

    with db.transaction() as s:
        [welcome] = s.scalars(
            select(OutboxMessage).where(OutboxMessage.recipient == "bob@example.org")
        ).all()
        welcome_print = fingerprint_of_sent(welcome.message)
        for i in range(SENT_COMPARED + 5):
            status = {3: "failed", 4: "bounced"}.get(i % 10, "sent" if i % 2 else "pending")
            to = "ann@example.org" if i == SENT_COMPARED + 4 else "bob@example.org"
            s.add(
                OutboxMessage(
                    kind="ack",
                    recipient=to,
                    message_id=f"<m{i}@example.org>",
                    message=body(i),
                    status=status,
                    attempts=0,
                    next_attempt_at=T0,
                    created_at=T0 + timedelta(minutes=i),
                )
            )
    found = intake_module._sent_to(db, config, "bob@example.org")
    reached = [i for i in range(SENT_COMPARED + 4) if i % 10 not in (3, 4)]  # not ann's
    expected = [fingerprint(f"Hello bob,\nmail {i}") for i in reversed(reached)]
    assert list(found) == [*expected[:SENT_COMPARED], welcome_print]
    assert intake_module._sent_to(db, config, None) == ()
    assert intake_module._sent_to(db, config, "nobody@example.org") == ()


@pytest.mark.parametrize("seed", range(3))
def test_what_we_sent_each_sender_is_picked_alike_from_any_history(intake, seed) -> None:
    """The latest SENT_COMPARED of our mail to a sender that may have reached it and the
    latest SECRET_COMPARED that gave a key, whatever the spellings of the address, the
    statuses and the secrets: as a plain reading of the whole history picks them, for one
    sender and for more senders than one statement asks for. Most rows keep their
    fingerprint (written with them); the others' are worked out from their bodies."""
    import random

    from snl_pbem.app.intake.reading import SECRET_COMPARED, _sent_to_many
    from snl_pbem.store import Player

    db, config = intake
    rng = random.Random(seed)
    bob = ["bob@example.org", "Bob@Example.ORG"]  # his row's spelling, and as he writes
    strangers = [f"x{i}@example.org" for i in range(38)]
    history: list[tuple[int, str, str, bool, str]] = []
    with db.transaction() as s:
        s.execute(
            Player.__table__.update()
            .where(Player.email == "bob@example.org")
            .values(email="Bob@Example.ORG")
        )
        s.query(OutboxMessage).delete()
        for i in range(700):
            to = rng.choice([*bob, *bob, "ann@example.org", rng.choice(strangers)])
            status = rng.choice(["sent", "sent", "pending", "failed", "bounced"])
            secret = rng.random() < 0.04
            kept = rng.random() < 0.8
            print_ = fingerprint(f"Hello,\nmail {i}")
            row = OutboxMessage(
                kind="ack",
                recipient=to,
                message_id=f"<h{seed}.{i}@example.org>",
                message=(
                    f"From: snl@example.org\r\nTo: {to}\r\nSubject: s{i}\r\n"
                    f"\r\nHello,\r\nmail {i}\r\n"
                ).encode(),
                status=status,
                attempts=0,
                next_attempt_at=T0,
                created_at=T0,
                # (a key's mail is scrubbed once sent: these bodies keep no fingerprint)
                secret=secret and kept,
                fingerprint=print_ if kept else None,
            )
            s.add(row)
            s.flush()
            history.append((row.id, to.lower(), status, row.secret, print_))

    def expected(sender: str) -> tuple[str, ...]:
        mine = sorted(
            (h for h in history if h[1] == sender and h[2] in ("sent", "pending")), reverse=True
        )
        keyed = [h for h in mine if h[3]][:SECRET_COMPARED]
        return tuple(h[4] for h in sorted({*mine[:SENT_COMPARED], *keyed}, reverse=True))

    senders = ["bob@example.org", "ann@example.org", *strangers, "nobody@example.org"]
    many = _sent_to_many(db, config, [*senders, None])
    assert many[None] == ()
    for sender in senders:
        assert many[sender] == expected(sender), sender
    assert intake_module._sent_to(db, config, "bob@example.org") == expected("bob@example.org")
    assert len(expected("bob@example.org")) > SENT_COMPARED  # the old keys counted too


def test_what_we_sent_is_exactly_the_latest_forty_and_the_latest_five_keys(intake) -> None:
    """At the bounds: one spelling and one status hold more than SENT_COMPARED of our mail
    newer than anything else, and more than SECRET_COMPARED that gave a key, all older than
    those: exactly the latest SENT_COMPARED and the latest SECRET_COMPARED with a key are
    compared, newest first. Some rows keep no fingerprint (written before it was kept with
    them): theirs are worked out from their bodies, scrubbed ones too."""
    from snl_pbem.app.intake.reading import SECRET_COMPARED

    db, config = intake
    expected_latest: list[str] = []
    expected_keys: list[str] = []
    with db.transaction() as s:
        s.query(OutboxMessage).delete()

        def add(i: int, status: str, secret: bool, kept: bool, to: str = "bob@example.org"):
            text = f"Hello bob,\r\nmail {i}\r\n"
            raw = (
                f"From: snl@example.org\r\nTo: {to}\r\nSubject: s{i}\r\n"
                f"Content-Type: text/plain; charset=utf-8\r\n\r\n{text}"
            ).encode()
            scrub = secret and status == "sent" and not kept  # as the sender leaves it
            s.add(
                OutboxMessage(
                    kind="welcome" if secret else "ack",
                    recipient=to,
                    message_id=f"<b{i}@example.org>",
                    message=scrubbed(raw, SCRUBBED) if scrub else raw,
                    status=status,
                    attempts=0,
                    next_attempt_at=T0,
                    created_at=T0,
                    secret=secret,
                    fingerprint=fingerprint(text) if kept else None,
                )
            )
            s.flush()
            return fingerprint(text)

        add(0, "pending", False, True, "Bob@Example.org")  # (not his row's spelling)
        keys = [add(i, "sent", True, i % 2 == 0) for i in range(1, 9)]  # 8 that gave a key
        add(9, "failed", True, True)  # never reached him
        latest = [add(i, "sent", False, i % 3 != 0) for i in range(10, 10 + SENT_COMPARED + 3)]
        expected_latest = latest[::-1][:SENT_COMPARED]
        expected_keys = keys[::-1][:SECRET_COMPARED]
    found = intake_module._sent_to(db, config, "bob@example.org")
    assert list(found) == [*expected_latest, *expected_keys]
    assert intake_module._sent_to_many(db, config, ["bob@example.org"])["bob@example.org"] == found


def test_what_we_sent_a_sender_is_read_along_indexes_not_their_history(intake) -> None:
    """Each reply's comparison reads the latest of our mail to its sender back from the
    newest along an index (the secret ones along their own): never the sender's whole
    history, sorted (issue 23: 301 us a sender at a hundred messages each)."""
    from sqlalchemy import text

    from snl_pbem.app.intake.reading import _latest_on_postgresql, _latest_on_sqlite

    db, _config = intake
    statement = _latest_on_sqlite(1) if db.is_sqlite else _latest_on_postgresql()
    with db.engine.connect() as connection:
        if db.is_sqlite:
            plan = " ".join(
                str(row)
                for row in connection.execute(
                    text(f"EXPLAIN QUERY PLAN {statement.text}"), {"r0": "bob@example.org"}
                )
            )
            assert "TEMP B-TREE" not in plan and "SCAN outbox" not in plan, plan
        else:  # a table this small is read whole unless told otherwise
            connection.execute(text("SET enable_seqscan = off"))
            connection.execute(text("SET enable_bitmapscan = off"))
            plan = " ".join(
                str(row)
                for row in connection.execute(
                    text(f"EXPLAIN {statement.text}"), {"recipients": ["bob@example.org"]}
                )
            )
            assert "Sort" not in plan and "Seq Scan on outbox" not in plan, plan
    assert "ix_outbox_recipient_status_id" in plan, plan
    assert "ix_outbox_recipient_secret" in plan, plan
