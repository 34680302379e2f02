"""We know what we sent (snl_pbem.mail.ours): lines of our own mail in a player's message are
a quote, never orders; the player's own orders, even the same lines, still count."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from snl_pbem.app.outbox import SCRUBBED
from snl_pbem.mail.commands import parse_commands
from snl_pbem.mail.compose import compose
from snl_pbem.mail.ours import (
    LINES_LABEL,
    MAX_SENT_LINES,
    fingerprint,
    fingerprint_of_sent,
    normalise,
    scrubbed,
    without_ours,
)
from snl_pbem.mail.parse import parse_message

WELCOME = """Hello bob,

You are playing Postal Snakes and Ladders: Test game.
3 players. Everyone starts off the board at 0; the first to reach
space 100 or beyond wins.

Your order key is k7mq-x2pa-9dfe-tw3h
Keep it private: your orders, STATUS and CLEAR need it.

Round 1 deadline: Fri 4 Jan 2030 18:00 (GMT)

To send orders, reply to this address with lines like these, with
your order key on the KEY line:

GAME g1
KEY (your order key)
DICE 4
TRAPDOOR 12

(TRAPDOOR is optional. A later message replaces an earlier one.)

Good luck!
--\x20
The g1 referee
"""
OLD_WELCOME = WELCOME.replace("KEY (your order key)", "KEY k7mq-x2pa-9dfe-tw3h")
"""The welcome before issue 20: its example was a complete order set."""
ACK = """Hello ann,

Round 2 (one turn): this is what counts now.
  Dice: turn 1: 4
  Trapdoor: 37

Your message gave some orders more than once (more than one order block):
a later line replaces an earlier one, so this is what counted:
  "DICE 4" (not "DICE 5")

Deadline: Mon 7 Jan 2030 18:00 (GMT)
A later message replaces this one as a whole.
--\x20
The g1 referee
"""


def read(text: str, *sent_texts: str):
    return parse_commands(without_ours(text, tuple(fingerprint(t) for t in sent_texts)))


def test_an_out_of_office_that_pastes_the_welcome_keeps_the_orders_written_above_it() -> None:
    for welcome in (WELCOME, OLD_WELCOME):
        text = "KEY bob-key-123\nDICE 3\n\nI am out of the office until Monday.\n\n" + welcome
        without = parse_commands(text)
        assert without.dice == (4,) and without.nomination == 12  # what went wrong before
        got = read(text, welcome)
        assert (got.order_key, got.dice, got.nomination, got.game) == (
            "bob-key-123",
            (3,),
            None,
            None,
        )
        assert got.problems == () and got.ignored == ("I am out of the office until Monday.",)


def test_a_message_that_is_only_our_mail_pasted_gives_nothing() -> None:
    for mail in (WELCOME, OLD_WELCOME, ACK):
        got = read(mail, mail)
        assert got == parse_commands("")


def test_the_same_orders_our_mail_showed_still_count_when_the_player_writes_them() -> None:
    """An acknowledgement or a welcome shows order lines; a player who writes those very
    lines means them: a block of command lines alone is never ours."""
    echoed = (
        "Your orders last round:\n\nGAME g1\nKEY ann-key-123\nDICE 4 2\nTRAPDOOR 37\n\nThanks\n"
    )
    honest = "Hi!\n\nGAME g1\nKEY ann-key-123\nDICE 4 2\nTRAPDOOR 37\n\nAnn\n"
    got = read(honest, echoed, WELCOME)
    assert (got.game, got.order_key, got.dice, got.nomination) == ("g1", "ann-key-123", (4, 2), 37)
    got = read("GAME g1\nKEY bob-key-123\nDICE 4\nTRAPDOOR 12\n", WELCOME)  # the welcome's own
    assert (got.game, got.dice, got.nomination) == ("g1", (4,), 12)
    got = read("DICE 4", ACK, WELCOME)
    assert got.dice == (4,)


def test_our_example_with_the_players_key_written_in_is_the_players() -> None:
    edited = WELCOME.replace("KEY (your order key)", "KEY bob-key-123").replace("DICE 4", "DICE 5")
    got = read(edited, WELCOME)
    assert (got.game, got.order_key, got.dice, got.nomination) == ("g1", "bob-key-123", (5,), 12)


def test_orders_top_posted_bottom_posted_or_between_our_unmarked_lines() -> None:
    orders = "GAME g1\nKEY bob-key-123\nDICE 2\n"
    parts = WELCOME.split("\n\n")
    for text in (
        orders + "\n" + WELCOME,  # top, pasted below without a header
        WELCOME + "\n" + orders,  # bottom: below our signature, which must not stop reading
        "\n\n".join([*parts[:5], orders, *parts[5:]]),  # between paragraphs
        "\n\n".join([*parts[:7], orders, *parts[7:]]),  # right after the example block
    ):
        got = read(text, WELCOME)
        assert (got.game, got.order_key, got.dice, got.nomination) == (
            "g1",
            "bob-key-123",
            (2,),
            None,
        ), text


def test_a_players_own_signature_still_ends_the_reading() -> None:
    got = read("DICE 3\n-- \nBob\nDICE 5 (not read)\n", WELCOME)
    assert got.dice == (3,)


def test_quoted_lines_stay_quoted_and_a_reply_header_still_cuts_what_we_do_not_know() -> None:
    quoted = "\n".join("> " + line for line in WELCOME.splitlines())
    header = "On Mon, 31 Dec 2029 at 10:00, Snakes and Ladders referee <snl@example.org> wrote:"
    got = read(f"{header}\n{quoted}\n\nKEY bob-key-123\nDICE 6\n", WELCOME)
    assert got.dice == (6,)  # a marked quote is skipped and the reply below it read
    # an unmarked old text after a header ends the reading, even where some of it is ours:
    # a line we do not recognise (here an old order) must not be read as new
    text = f"KEY bob-key-123\nDICE 3\n\n{header}\n{WELCOME}\nDICE 6\n"
    got = read(text, WELCOME)
    assert got.dice == (3,) and got.cut is not None


def test_fingerprints_hold_no_key_and_survive_the_scrub() -> None:
    other = WELCOME.replace("k7mq-x2pa-9dfe-tw3h", "abcd-efgh-jkmn-pqrs")
    assert fingerprint(WELCOME) == fingerprint(other)
    config_key = WELCOME.replace("k7mq-x2pa-9dfe-tw3h", "bob-key-123")
    assert fingerprint(config_key) == fingerprint(WELCOME)
    assert normalise("KEY: bob-key-123") == "key ****" and normalise("Keyboard x") == "keyboard x"
    raw = compose(
        sender="snl@example.org",
        sender_name="Snakes and Ladders referee",
        to="bob@example.org",
        subject="[g1] Welcome",
        body=OLD_WELCOME,
        now=datetime(2029, 12, 1, tzinfo=UTC),
        message_id="<snl.1@example.org>",
        game_name="g1",
    )
    kept = scrubbed(raw, SCRUBBED)
    assert b"k7mq" not in kept and SCRUBBED in kept and kept.startswith(raw.split(b"\r\n\r\n")[0])
    assert fingerprint_of_sent(kept, scrubbed=True) == fingerprint_of_sent(raw) != ""
    assert fingerprint_of_sent(raw) == fingerprint(OLD_WELCOME)
    text = "KEY bob-key-123\nDICE 3\n\n" + OLD_WELCOME.replace("k7mq-x2pa-9dfe-tw3h", "bob-key-123")
    got = parse_commands(without_ours(text, (fingerprint_of_sent(kept, scrubbed=True),)))
    assert (got.order_key, got.dice, got.nomination) == ("bob-key-123", (3,), None)


def test_a_fingerprint_is_read_only_from_a_body_we_scrubbed() -> None:
    """A body that shows what a player wrote (an acknowledgement lists ignored lines) could
    carry a forged fingerprint: it is read as text, whatever it holds."""
    forged = (
        '  "' + LINES_LABEL.decode() + " " + fingerprint("Hi,\nGAME g1\nKEY x-1234\nDICE 4") + '"'
    )
    raw = compose(
        sender="snl@example.org",
        sender_name="r",
        to="ann@example.org",
        subject="s",
        body=ACK + forged + "\n",
        now=datetime(2029, 12, 1, tzinfo=UTC),
        message_id="<snl.2@example.org>",
    )
    assert fingerprint_of_sent(raw) == fingerprint(ACK + forged)
    got = parse_commands(
        without_ours("Hi,\nGAME g1\nKEY x-1234\nDICE 4", (fingerprint_of_sent(raw),))
    )
    assert got.dice == (4,) and got.order_key == "x-1234"


def test_parse_message_applies_it_to_the_text_it_reads_not_to_the_text_it_returns() -> None:
    body = "KEY bob-key-123\r\nDICE 3\r\n\r\n" + WELCOME.replace("\n", "\r\n")
    raw = b"From: bob@example.org\r\nSubject: Re: [g1] Welcome\r\n\r\n" + body.encode()
    read_alone = parse_message(raw, "snl@example.org")
    read_knowing = parse_message(raw, "snl@example.org", (fingerprint(WELCOME),))
    assert read_alone.commands is not None and read_alone.commands.dice == (4,)
    assert read_knowing.commands is not None and read_knowing.commands.dice == (3,)
    assert read_knowing.text == read_alone.text  # what is kept and shown is what came


def test_the_work_is_bounded_whatever_the_text() -> None:
    """The worst shapes: every line of ours in every message, and a text of thousands of
    lines that each match everywhere. Bounded by MAX_STEPS (no timing asserted: the time
    is printed)."""
    common = "\n".join(["-- ", "The g1 referee", "Hello bob,"] * (MAX_SENT_LINES // 3))
    sent = tuple(fingerprint(common) for _ in range(60))
    text = "\n".join(["The g1 referee", "Hello bob,", "-- "] * 1700) + "\nKEY bob-key-123\nDICE 3"
    started = time.perf_counter()
    out = without_ours(text, sent)
    print(f"worst match: {time.perf_counter() - started:.3f} s")
    assert out.splitlines()[:2] == ["", ""]
    huge = "\n".join(f"line {i}" for i in range(100_000))
    assert without_ours(huge, sent) == huge  # nothing of ours; past the scan, untouched


def test_the_fingerprint_of_the_text_is_the_fingerprint_of_the_mail_it_became() -> None:
    """Personal mail is fingerprinted from its text as it is written (``outbox.mail_row``),
    and anything else from its stored bytes: the two must agree whatever the text holds
    (Thai, Chinese, lines longer than quoted-printable's, trailing spaces, a dot or "From "
    starting a line, CR LF or bare CR), or a pasted reply would go unrecognised."""
    thai = "ลูกเต๋าของคุณคือ 4 และประตูกลคือ 12 " * 5
    bodies = [
        WELCOME,
        ACK,
        f"สวัสดี,\n\n{thai}\n\n你的订单已收到\uff1a骰子 4\uff0c陷阱门 37。\n-- \nผู้ตัดสิน\n",
        "x" * 300 + "\n" + "word " * 80 + "\n.\nFrom here on\n   \ttrailing   \n",
        "first\r\nsecond\rthird\n\n\nfourth=20 =\n",
    ]
    for body in bodies:
        raw = compose(
            sender="snl@example.org",
            sender_name="Snakes and Ladders referee",
            to="ann@example.org",
            subject="Orders received",
            body=body,
            now=datetime(2030, 1, 4, tzinfo=UTC),
            message_id="<m1@example.org>",
            game_name="Test game",
            attachments=(("g1.txt", "text/plain", b"DICE 9\r\n"),) if body is ACK else (),
        )
        assert fingerprint(body), body
        assert fingerprint_of_sent(raw) == fingerprint(body), body


def test_line_digests_are_kept_without_the_lines() -> None:
    """Each line's digest is made once (issue 23), kept by a hash of the line: a key or a
    code in our mail is never kept in memory by it; and the fingerprint is the one worked
    out line by line."""
    from snl_pbem.mail import ours

    text = "Hello ann,\n\nYour order key is k7m2-p9qx-4rtz-w8hn\nKEY k7m2-p9qx-4rtz-w8hn\n-- \n"
    lines = [ours.normalise(line) for line in text.split("\n")]
    assert ours.fingerprint(text) == " ".join(ours.digest(line) for line in lines if line)
    assert ours.fingerprint(text) == ours.fingerprint(text)  # the second from what is kept
    kept = repr(ours._LINE_DIGESTS)
    assert "k7m2" not in kept and b"k7m2" not in b"".join(ours._LINE_DIGESTS)


def test_only_the_players_lines_are_looked_for_in_what_we_sent() -> None:
    """Issue 23: the index of our mail holds the digests of the message's own lines only,
    each with the places the whole index gave it (newest first, bounded)."""
    import random

    from snl_pbem.mail import ours

    rng = random.Random(23)
    words = [f"{n:012x}" for n in range(300)]
    sent = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 500))) for _ in range(70)]
    whole: dict[str, list[int]] = {}
    for number, found in enumerate(sent[: ours.MAX_SENT_MESSAGES]):
        for position, word in enumerate(found.split()[: ours.MAX_SENT_LINES]):
            places = whole.setdefault(word, [])
            if len(places) < ours.MAX_POSITIONS:
                places.append(number * ours._PLACE + position)
    wanted = set(rng.sample(words, 40)) | {"f" * 12}
    index = ours._index(sent, wanted)
    assert index == {word: whole[word] for word in wanted if word in whole}
    assert any(len(places) == ours.MAX_POSITIONS for places in index.values())


def test_only_lines_of_ours_are_remembered_as_commands_by_digest(monkeypatch) -> None:
    """What a line is (a command or prose) is remembered (``_remembered_command``) only
    for the lines found in our mail as compared, with no secret shape: by their digest,
    never as written. Any other line may hold a key or a code (``CONFIRM k7mqx2pa``,
    ``KEY: bob-key-123 thanks``), and a digest of so predictable a line can be reversed
    by trying them all: it is read anew each time. The answers are the same either way;
    at most ``_COMMANDS_KNOWN_MAX`` are kept, the oldest forgotten first, from any number
    of threads."""
    import hashlib
    import sys
    import threading

    from snl_pbem.mail import ours

    def digest_of(line: str) -> bytes:
        return hashlib.blake2b(line.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    read_anew: list[str] = []
    real = ours.is_command

    def recording(line: str) -> bool:
        read_anew.append(line)
        return real(line)

    monkeypatch.setattr(ours, "is_command", recording)
    monkeypatch.setattr(ours, "_COMMANDS_KNOWN", {})
    keys = ("bob-key-123", "bob-key-456", "bob-key-789")
    for key in keys:  # a new key each time, a code beside the example's commands
        pasted = WELCOME.replace("KEY (your order key)", f"KEY: {key} thanks")
        pasted = pasted.replace("DICE 4\n", "DICE 4\nCONFIRM k7mqx2pa\n")
        got = read(pasted, WELCOME)
        assert (got.game, got.order_key, got.dice, got.nomination) == ("g1", key, (4,), 12)
    ours_lines = {line for line in WELCOME.splitlines() if line.strip()}
    remembered = {
        line for line in read_anew if line in ours_lines and "****" not in normalise(line)
    }
    assert {"GAME g1", "DICE 4", "TRAPDOOR 12"} <= remembered
    assert set(ours._COMMANDS_KNOWN) == {digest_of(line) for line in remembered}
    for line in ("CONFIRM k7mqx2pa", *(f"KEY: {key} thanks" for key in keys)):
        assert digest_of(line) not in ours._COMMANDS_KNOWN
        assert read_anew.count(line) == (3 if line.startswith("CONFIRM") else 1)
    for line in remembered:
        assert read_anew.count(line) == 1  # read once, then remembered
    assert read_anew.count("Your order key is k7mq-x2pa-9dfe-tw3h") == 3  # a secret shape
    for line in ["DICE 4", "Hello bob,", "KEY: bob-key-123 thanks", "CONFIRM k7mqx2pa"]:
        assert ours._remembered_command(line) == real(line)  # remembered or not: the same

    monkeypatch.setattr(ours, "_COMMANDS_KNOWN", {})
    limit = ours._COMMANDS_KNOWN_MAX

    def fill(start: int) -> None:
        for n in range(start, start + limit):
            ours._remembered_command(f"DICE {n}")

    threads = [threading.Thread(target=fill, args=(k * limit,)) for k in range(6)]
    interval = sys.getswitchinterval()
    # the threads taking turns as often as they can (the bound under contention; the
    # lock's race itself is too narrow to be met surely)
    sys.setswitchinterval(1e-6)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert len(ours._COMMANDS_KNOWN) == limit
    monkeypatch.setattr(ours, "_COMMANDS_KNOWN", {})
    for n in range(limit + 1):
        ours._remembered_command(f"TRAPDOOR {n}")
    known = ours._COMMANDS_KNOWN
    assert len(known) == limit and digest_of("TRAPDOOR 0") not in known  # the oldest went
    assert digest_of("TRAPDOOR 1") in known and digest_of(f"TRAPDOOR {limit}") in known
