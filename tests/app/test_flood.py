"""A flood starves no one (issue 20): forged sign-ups from many addresses, or in one
victim's name, neither void an honest player's code nor leave her request unanswered;
ADDRESS codes are bounded per player and per game; names and addresses that only look
different are one. On SQLite and PostgreSQL (the bounds are counts in the database),
through ``ingest`` with mail as Gmail writes it (``test_membership.Mailer``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from mailhelpers import mail_to
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from test_membership import CONFIG, T0, Mailer, count, flat, gmail, player

from snl_pbem.app import membership, replies
from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.intake import ingest
from snl_pbem.config import Config, load_config
from snl_pbem.store import AuditEntry, Confirmation, Database, Game, OutboxMessage, Signup

GUEST_MAIL = ("guest-help", "list", "code", "address-code", "guest-reply", "guest-note")
"""Every kind of mail that may go to an address holding no seat."""


@pytest.fixture
def config(db: Database, tmp_path: Path) -> Config:
    path = tmp_path / "config.toml"
    path.write_text(CONFIG.format(url=db.url, auto="false"))
    loaded = load_config(path)
    sync_games(db, loaded, T0)
    start_game(db, loaded, "g1", T0)
    return loaded


@pytest.fixture
def m(db: Database, config: Config) -> Mailer:
    return Mailer(db, config)


def notes(db: Database, who: str) -> list[str]:
    return [flat(text) for text in mail_to(db, who, "guest-note")]


def referee_told(db: Database, title: str) -> int:
    return sum(title in text for text in mail_to(db, "ref@example.org", "referee-notice"))


def guest_mail_in_hour(db: Database) -> int:
    return count(db, OutboxMessage, OutboxMessage.kind.in_(GUEST_MAIL))


def answered(db: Database, who: str) -> Callable[[], int]:
    """How many messages went to ``who`` so far (of any kind): a request it sent was
    answered when this grew."""
    return lambda: count(db, OutboxMessage, OutboxMessage.recipient == who)


# -- sign-up floods -----------------------------------------------------------------------


def test_thirty_forged_joins_from_thirty_domains_void_nothing_and_silence_no_one(
    db: Database, m: Mailer
) -> None:
    """The review's flood, at thirty domains (so no per-domain bound helps): the honest
    code sent before it still seats its owner, the flood gets at most the game's codes
    for the hour, and the honest JOIN after it gets a short reason, not silence. The
    referee hears of it once."""
    assert m.send("ann@honest.example", "JOIN appr Ann Lee") == "processed: join: code sent"
    code = m.code("ann@honest.example")
    for i in range(30):
        m.send(f"x{i}@forger{i}.example", f"JOIN appr Bot{i}")
    flood_codes = count(db, OutboxMessage, OutboxMessage.kind == "code") - 1
    assert flood_codes == membership.MAX_UNCONFIRMED_PER_GAME - 1
    heard = answered(db, "bea@honest.example")
    assert m.send("bea@honest.example", "JOIN appr Bea") == (
        "processed: join: no code sent (the game's sign-ups for the hour)"
    )
    assert heard() == 1 and "send your JOIN again in an hour" in notes(db, "bea@honest.example")[0]
    assert referee_told(db, "many sign-ups") == 1
    assert guest_mail_in_hour(db) <= replies.GUEST_MAIL_PER_HOUR
    # nothing was voided: ann's code seats her, each flood code is still open
    assert m.send("ann@honest.example", f"CONFIRM {code}") == (
        "processed: joined appr as Ann Lee: waiting"
    )
    with db.transaction() as s:
        assert membership.unconfirmed_count(s, _game(s, "appr"), T0) == flood_codes
    # an hour on, bea is let in, and the referee may hear again
    later = T0 + membership.SIGNUP_WINDOW + timedelta(minutes=1)
    assert m.send("bea@honest.example", "JOIN appr Bea", at=later).endswith("code sent")


def test_a_flood_from_one_domain_counts_as_one_domain(db: Database, m: Mailer) -> None:
    """Thirty addresses at one domain get the domain's codes for the hour, then a short
    reason each; a joiner at another domain is not held back, and the game's own bound
    is not reached by one domain."""
    for i in range(30):
        m.send(f"u{i}@bulk.example", f"JOIN open4 Bulk{i}")
    sent = len([1 for i in range(30) if mail_to(db, f"u{i}@bulk.example", "code")])
    assert sent == replies.GUEST_DOMAIN_LIMITS["code"]
    assert "addresses at bulk.example" in notes(db, "u29@bulk.example")[0]
    assert m.send("cat@elsewhere.example", "JOIN open4 Cat") == "processed: join: code sent"
    assert referee_told(db, "many sign-ups") == 1
    # the +tag forms of one mailbox are one address's budget, not several
    for i in range(5):
        m.send(f"cat+{i}@elsewhere.example", f"JOIN appr Cat{i}")
    tagged = sum(len(mail_to(db, f"cat+{i}@elsewhere.example", "code")) for i in range(5))
    assert tagged == 2  # cat@ had one of her three today


def test_mail_to_non_players_is_capped_per_hour_however_it_is_spread(
    db: Database, m: Mailer
) -> None:
    """HELP, LIST, sign-up answers and codes from 200 addresses at 200 domains: together
    never more than GUEST_MAIL_PER_HOUR in an hour."""
    bodies = ("HELP", "LIST", "JOIN nosuch Ann", "JOIN open4 Someone", "CONFIRM abcd-efgh")
    for i in range(200):
        m.send(f"p{i}@d{i}.example", bodies[i % len(bodies)])
    assert guest_mail_in_hour(db) == replies.GUEST_MAIL_PER_HOUR
    later = T0 + timedelta(hours=1, minutes=1)
    assert m.send("late@d.example", "LIST", at=later) == "processed: list sent"


# -- one victim, targeted --------------------------------------------------------------


def test_forged_wrong_codes_only_slow_the_victims_code(db: Database, m: Mailer) -> None:
    """100 forged wrong CONFIRMs in the victim's name: her code is never void. Her right
    code sent in the same hour is not checked, and she is told when to send it again
    (not silence); after the hour it seats her. The notes she got stay few."""
    m.send("vic@example.com", "JOIN open4 Vic")
    code = m.code("vic@example.com")
    for i in range(100):
        m.send("vic@example.com", f"CONFIRM {i:04d}-qqqq", at=T0 + timedelta(seconds=i))
    with db.transaction() as s:
        row = s.scalar(select(Confirmation).where(Confirmation.email == "vic@example.com"))
        assert row.used_at is None and row.expires_at > T0 + timedelta(days=2)
        assert row.wrong == membership.CODE_TRIES_PER_HOUR  # resting tries are not counted
    assert m.send("vic@example.com", f"CONFIRM {code}", at=T0 + timedelta(minutes=30)) == (
        "processed: confirm: not checked (codes resting)"
    )
    told = notes(db, "vic@example.com")
    assert len(told) == 3 and "send it again after that" in told[-1]
    # the rest began at the first try of the hour: an hour after it, she is in
    back = T0 + membership.CODE_TRY_WINDOW
    assert m.send("vic@example.com", f"CONFIRM {code}", at=back) == (
        "processed: joined open4 as Vic: seated"
    )


def test_a_new_hour_counts_afresh_and_slow_guessing_still_fails(db: Database, m: Mailer) -> None:
    """A guesser keeping to the counted tries: five each hour for the code's three days,
    all wrong (the code is never among them, nor void); the owner's code works at the
    end."""
    m.send("slow@example.com", "JOIN open4 Slow")
    code = m.code("slow@example.com")
    hours = int(membership.CODE_LIFETIME / timedelta(hours=1)) - 1
    for hour in range(0, hours, 6):  # every sixth hour: enough to see the count restart
        at = T0 + timedelta(hours=hour, minutes=1)
        for i in range(membership.CODE_TRIES_PER_HOUR):
            detail = m.send("slow@example.com", f"CONFIRM {hour:02d}{i:02d}-zzzz", at=at)
            assert detail == "processed: confirm: wrong or expired code", (hour, i)
    with db.transaction() as s:
        row = s.scalar(select(Confirmation).where(Confirmation.email == "slow@example.com"))
        assert row.wrong == membership.CODE_TRIES_PER_HOUR * len(range(0, hours, 6))
    at = T0 + timedelta(hours=hours, minutes=30)
    assert m.send("slow@example.com", f"CONFIRM {code}", at=at).endswith("seated")


def test_forged_joins_in_the_victims_name_leave_her_an_answer(db: Database, m: Mailer) -> None:
    """Forged JOINs from her address: a repeat for a game whose code waits sends no new
    code and voids nothing (a reminder, once an hour); JOINs for three games spend her
    day's codes, and her own JOIN then gets one short note, not silence (and not a note
    per forgery)."""
    m.send("vic@example.com", "JOIN open4 Vic")
    code = m.code("vic@example.com")
    for i in range(10):
        assert "already waits" in m.send("vic@example.com", f"JOIN open4 Mallory{i}")
    assert len(mail_to(db, "vic@example.com", "code")) == 1
    (reminder,) = notes(db, "vic@example.com")
    assert "to join open4 as 'Vic'" in reminder and "let it expire" in reminder
    for game in ("appr", "cl"):
        m.send("vic@example.com", f"JOIN {game} Mallory")
    assert len(mail_to(db, "vic@example.com", "code")) == 3
    for _ in range(3):
        assert m.send("vic@example.com", "JOIN g1 Vic").endswith("no code sent (budget: address)")
    over = [n for n in notes(db, "vic@example.com") if "too many codes today" in n]
    assert len(over) == 1  # rate-limited: once an hour
    # the next hour she is told again, and her first code still seats her
    later = T0 + timedelta(hours=1, minutes=1)
    m.send("vic@example.com", "JOIN g1 Vic", at=later)
    assert sum("too many codes today" in n for n in notes(db, "vic@example.com")) == 2
    assert m.send("vic@example.com", f"CONFIRM {code}", at=later).endswith("seated")
    assert player(db, "open4", "Vic").email == "vic@example.com"


def test_observe_repeated_reminds_and_keeps_the_code(db: Database, m: Mailer) -> None:
    m.send("obs@example.com", "OBSERVE g1")
    code = m.code("obs@example.com")
    assert "already waits" in m.send("obs@example.com", "OBSERVE g1")
    assert "to follow g1" in notes(db, "obs@example.com")[0]
    assert m.send("obs@example.com", f"CONFIRM {code}") == "processed: observing"


# -- ADDRESS codes ---------------------------------------------------------------------


def test_address_codes_are_capped_per_player_and_per_game(
    db: Database, m: Mailer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One key cannot mail codes to strangers without end: ADDRESS_CODES_PER_PLAYER_PER_DAY
    a day per player, ADDRESS_CODES_PER_GAME_PER_DAY for the game; the player is told."""
    monkeypatch.setattr(membership, "ADDRESS_CODES_PER_GAME_PER_DAY", 5)
    per_player = membership.ADDRESS_CODES_PER_PLAYER_PER_DAY
    results = [
        m.send("ann@example.org", f"GAME g1\nKEY ann-key-123\nADDRESS s{i}@stranger{i}.example")
        for i in range(10)
    ]
    assert results.count("processed: address: code sent") == per_player
    assert "try again tomorrow" in flat(m.last("ann@example.org", "membership"))
    for i in range(10):
        m.send("bob@example.org", f"GAME g1\nKEY bob-key-123\nADDRESS t{i}@other{i}.example")
    assert count(db, OutboxMessage, OutboxMessage.kind == "address-code") == 5
    assert "has sent as many address codes today" in flat(m.last("bob@example.org", "membership"))
    # a day on, ann may ask again; her open codes were never voided
    later = T0 + timedelta(days=1, minutes=1)
    assert m.send(
        "ann@example.org", "GAME g1\nKEY ann-key-123\nADDRESS ann@new.example", at=later
    ) == ("processed: address: code sent")


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("snl+g1@example.org", "one of the game's own addresses"),
        ("SNL+x@Example.org", "one of the game's own addresses"),
        ("ref+1@example.org", "one of the game's own addresses"),
        ("MAILER-DAEMON@example.net", "mail robot"),
        ("postmaster@example.net", "mail robot"),
        ("no-reply@example.net", "mail robot"),
        ("noreply+x@example.net", "mail robot"),
        ("do_not_reply@example.net", "mail robot"),
        ("bob+ann@example.org", "belongs to another player"),
    ],
)
def test_address_to_our_own_or_a_robot_is_refused(
    db: Database, m: Mailer, target: str, why: str
) -> None:
    m.send("ann@example.org", f"GAME g1\nKEY ann-key-123\nADDRESS {target}")
    assert why in flat(m.last("ann@example.org")), target
    assert count(db, OutboxMessage, OutboxMessage.kind == "address-code") == 0


def test_a_player_may_move_to_her_own_plus_address(db: Database, m: Mailer) -> None:
    assert m.send("ann@example.org", "GAME g1\nKEY ann-key-123\nADDRESS ann+snl@example.org") == (
        "processed: address: code sent"
    )


# -- names and mailboxes ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["Dee.", "D3e", "De e", "DEE", "d-e-e", "D33", "De'e", "Dee_"])
def test_names_that_only_look_different_are_taken(db: Database, m: Mailer, name: str) -> None:
    assert m.join("dee@example.com", "open4", "Dee").endswith("seated")
    m.send("copy@example.com", f"JOIN open4 {name}")
    text = flat(m.last("copy@example.com"))
    assert "taken" in text or "too like" in text, (name, text)
    assert count(db, Confirmation, Confirmation.email == "copy@example.com") == 0


def test_look_alike_names_are_refused_among_waiting_sign_ups_and_reserved_names(
    db: Database, m: Mailer
) -> None:
    assert m.join("bill@example.com", "appr", "Bill").endswith("waiting")
    for i, name in enumerate(("Bi11", "BiII", "B1ll", "Re feree", "R3feree", "Y0U")):
        m.send(f"n{i}@example.com", f"JOIN appr {name}")
        text = flat(m.last(f"n{i}@example.com"))
        assert "too like" in text or "cannot be a player's name" in text, (name, text)
    assert m.send("dean@example.com", "JOIN appr Dean") == "processed: join: code sent"


def test_skeletons() -> None:
    same = [("Dee", "D3e"), ("Dee", "De e"), ("Dee", "dee."), ("Bill", "Bi11"), ("Mo", "Rno")]
    for a, b in same:
        assert membership.name_skeleton(a) == membership.name_skeleton(b), (a, b)
    for a, b in [("Dee", "Dean"), ("Ann", "Anne"), ("Bo", "Bob")]:
        assert membership.name_skeleton(a) != membership.name_skeleton(b), (a, b)


def test_a_second_seat_through_a_plus_address_or_gmail_dots_is_refused(
    db: Database, m: Mailer
) -> None:
    assert m.join("ann.lee@gmail.com", "open4", "Ann").endswith("seated")
    for i, other in enumerate(
        (
            "ann.lee+2@gmail.com",
            "annlee@gmail.com",
            "a.n.n.lee@googlemail.com",
            "ANN.LEE+x@Gmail.com",
        )
    ):
        m.send(other, f"JOIN open4 Second{chr(65 + i)}")
        assert "one seat per mailbox" in flat(m.last(other.lower())), other
    assert m.join("bo@example.com", "appr", "Bo").endswith("waiting")
    m.send("bo+again@example.com", "JOIN appr Bobby")
    assert "has signed up for appr" in flat(m.last("bo+again@example.com"))
    # elsewhere dots are kept: two people may have them
    assert m.send("a.nn@example.com", "JOIN appr Ann").endswith("code sent")
    assert m.send("ann@example.com", "JOIN appr Anne").endswith("code sent")
    assert count(db, Signup) == 2


def test_the_check_is_made_again_at_confirm(db: Database, m: Mailer) -> None:
    """Two forms of one mailbox both asked before either confirmed: the second CONFIRM
    is refused (the first holds the seat)."""
    m.send("cy@example.com", "JOIN open4 Cy")
    m.send("cy+2@example.com", "JOIN open4 Cyrus")
    first, second = m.code("cy@example.com"), m.code("cy+2@example.com")
    assert m.send("cy@example.com", f"CONFIRM {first}").endswith("seated")
    assert "one seat per mailbox" in m.send("cy+2@example.com", f"CONFIRM {second}")


def test_two_joins_at_once_cannot_both_take_the_last_code_of_the_hour(
    db: Database, m: Mailer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The game's bound is counted under its row lock: of two JOINs at the same moment
    for the last place, one gets a code, the other a reason."""
    monkeypatch.setattr(membership, "MAX_UNCONFIRMED_PER_GAME", 2)
    m.send("first@one.example", "JOIN appr First")
    barrier = threading.Barrier(2)
    results: list[str] = []

    def join(who: str, name: str) -> None:
        raw = gmail(who, f"JOIN appr {name}", tag=f"race-{name}")
        barrier.wait()
        results.append(ingest(db, m.config, raw, T0, "race").detail)

    threads = [
        threading.Thread(target=join, args=(f"{n.lower()}@{n.lower()}.example", n))
        for n in ("Left", "Right")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [
        "join: code sent",
        "join: no code sent (the game's sign-ups for the hour)",
    ]
    assert count(db, Confirmation) == 2


def _game(session: Session, name: str) -> Game:
    return session.scalar(select(Game).where(Game.name == name))


def test_notes_are_recorded_once_an_hour_each(db: Database, m: Mailer) -> None:
    """The notes' bound is in the database (the audit log), so it holds across intakes
    and restarts: ten repeats, one note, one audit row."""
    m.send("rep@example.com", "JOIN open4 Rep")
    for _ in range(10):
        m.send("rep@example.com", "JOIN open4 Rep")
    assert (
        count(db, AuditEntry, AuditEntry.action == "guest-note")
        == len(notes(db, "rep@example.com"))
        == 1
    )
    with db.transaction() as s:
        assert s.scalar(select(func.count()).select_from(Confirmation)) == 1
