"""Which language a mail is written in, and the parts that make it (issue 25).

A game has a language (``language`` in its table), a player may have their own (in the
config's players table, or by mail: LANGUAGE, and JOIN ... LANGUAGE); what a player
chose by mail comes first. A stranger's HELP, LIST and JOIN are answered in the language
they wrote in when its letters make that clear. The referee's mail stays English. Times
are written in the reader's locale; Thai and Chinese lines are broken only where their
words allow; the mail says its language in ``Content-Language``.
"""

from __future__ import annotations

import email
import email.policy
import pickle
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from pythainlp.tokenize import word_tokenize
from sqlalchemy import select

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.intake import ingest
from snl_pbem.app.outbox import mail_language
from snl_pbem.config import Config, load_config
from snl_pbem.errors import ConfigError
from snl_pbem.i18n import LANGUAGES, When, language, local_time, speaking, width, wrap, written_in
from snl_pbem.rules.words import Text, ntr, tr
from snl_pbem.store import Database, Game, OutboxMessage, Player, Signup
from snl_pbem.store.migrate import upgrade
from snl_pbem.timeutil import show

T0 = datetime(2029, 12, 1, 12, 0, tzinfo=UTC)

CONFIG = """
timezone = "Asia/Bangkok"
[database]
url = "{url}"
[mail]
address = "snl@example.org"
referee = "ref@example.org"
replies_per_hour = 50

[[games]]
id = "g1"
title = "Three tongues"
board = "standard"
language = "{language}"
first_deadline = "2029-12-04T18:00"
round_length = "3d"
signup = "open"
players = [
  {{ name = "ann", email = "ann@example.org", key = "ann-key-123" }},
  {{ name = "bo", email = "bo@example.org", key = "bo-key-1234", language = "zh" }},
  {{ name = "chai", email = "chai@example.org", key = "chai-key-123" }},
]
"""


class Post:
    """Mail to the intake, and what came back, parsed as a player's program reads it."""

    def __init__(self, tmp_path: Path, game_language: str = "en") -> None:
        self.db = Database(f"sqlite:///{tmp_path / 'snl.db'}")
        upgrade(self.db)
        path = tmp_path / "config.toml"
        path.write_text(CONFIG.format(url=self.db.url, language=game_language))
        self.config: Config = load_config(path)
        sync_games(self.db, self.config, T0)
        start_game(self.db, self.config, "g1", T0)
        self.n = 0

    def send(self, sender: str, body: str, subject: str = "orders") -> str:
        self.n += 1
        raw = (
            f"From: <{sender}>\r\nTo: snl@example.org\r\nSubject: {subject}\r\n"
            f"Message-ID: <lang{self.n}@example.net>\r\nMIME-Version: 1.0\r\n"
            'Content-Type: text/plain; charset="utf-8"\r\nContent-Transfer-Encoding: 8bit\r\n'
            f"\r\n{body}\r\n"
        ).encode()
        result = ingest(self.db, self.config, raw, T0, "test")
        return f"{result.status}: {result.detail}"

    def mail(self, who: str) -> list[email.message.EmailMessage]:
        with self.db.transaction() as s:
            rows = s.scalars(
                select(OutboxMessage.message)
                .where(OutboxMessage.recipient == who)
                .order_by(OutboxMessage.id)
            ).all()
        return [email.message_from_bytes(r, policy=email.policy.default) for r in rows]

    def last(self, who: str) -> email.message.EmailMessage:
        return self.mail(who)[-1]

    def player(self, name: str) -> Player:
        with self.db.transaction() as s:
            found = s.scalars(select(Player).where(Player.name == name)).one()
            s.expunge(found)
            return found


@pytest.fixture
def post(tmp_path: Path) -> Iterator[Post]:
    made = Post(tmp_path)
    yield made
    made.db.dispose()


def language_of(message: email.message.EmailMessage) -> str:
    text = message.get_body(("plain",))
    assert text is not None
    return str(text["Content-Language"] or message["Content-Language"])


# -- names, letters, widths ------------------------------------------------------------


def test_a_language_is_named_as_players_write_it() -> None:
    for written, code in [
        ("zh", "zh-Hans"),
        ("ZH-CN", "zh-Hans"),
        ("zh-Hans", "zh-Hans"),
        ("Chinese", "zh-Hans"),
        ("中文", "zh-Hans"),
        ("th", "th"),
        ("Thai", "th"),
        ("ไทย", "th"),
        ("EN", "en"),
        ("English", "en"),
    ]:
        assert language(written) == code, written
    for other in ("fr", "zh-TW", "", "thai food", None):
        assert language(other) is None, other
    assert list(LANGUAGES) == ["en", "zh-Hans", "th"]


def test_what_a_message_is_written_in_is_told_by_its_letters() -> None:
    assert written_in("请告诉我怎么下指令") == "zh-Hans"
    assert written_in("HELP\n谢谢") == "zh-Hans"
    assert written_in("ช่วยด้วย HELP") == "th"
    assert written_in("HELP please") is None
    assert written_in("ヘルプをお願いします 指令") is None  # Japanese: kana beside the kanji
    assert written_in("HELP 谢") is None  # one character is no sign


def test_a_line_is_measured_in_columns() -> None:
    assert width("DICE 4") == 6
    assert width("骰子 4") == 6
    assert width("ที่นี่") == 2  # the marks above and below take no column
    assert width("ＤＩＣＥ") == 8


THAI = (
    "ถ้าไม่แก้ไขก่อนกำหนดส่ง จะถือว่าคุณไม่ได้ส่งคำสั่ง กรรมการจะเดินแทนด้วยแต้มต่ำสุด"
    "ที่เดินได้ และการเสนอประตูกลของคุณยังคงอยู่"
)
CHINESE = (
    "如果截止时间前没有改正，就当作你没有下指令：裁判会替你走能走的最小点数；你的陷阱提名仍然有效。"
)


@pytest.mark.parametrize("columns", [20, 36, 72])
def test_thai_breaks_only_between_words(columns: int) -> None:
    lines = wrap(THAI, columns, "th")
    assert len(lines) > 1 and all(width(line) <= columns for line in lines)
    assert "".join(lines).replace(" ", "") == THAI.replace(" ", "")
    ends, at = set(), 0
    for word in word_tokenize(THAI.replace(" ", ""), engine="newmm"):
        at += len(word)
        ends.add(at)
    at = 0
    for line in lines[:-1]:
        at += len(line.replace(" ", ""))
        assert at in ends, f"a line ends inside a word: {line!r}"


@pytest.mark.parametrize("columns", [20, 36, 72])
def test_chinese_breaks_between_characters_and_never_before_a_closing_mark(columns: int) -> None:
    lines = wrap(CHINESE, columns, "zh-Hans")
    assert len(lines) > 1 and all(width(line) <= columns for line in lines)
    assert "".join(lines) == CHINESE
    assert not any(line[0] in "，。；：）" for line in lines)


def test_english_wraps_at_spaces_as_before() -> None:
    text = "Reading stopped at the line: what follows it looks like quoted text, so nothing"
    assert wrap(text, 30, "en") == [
        "Reading stopped at the line:",
        "what follows it looks like",
        "quoted text, so nothing",
    ]


# -- words and times shown in the reader's language ---------------------------------------


class Shouting:
    """A catalog for tests: every message in capitals."""

    def gettext(self, message: str) -> str:
        parts = re.split(r"(%\(\w+\)s|\{\w+\})", message)  # the placeholders as they are
        return "".join(p if i % 2 else p.upper() for i, p in enumerate(parts))

    def ngettext(self, singular: str, plural: str, n: int) -> str:
        return self.gettext(singular if n == 1 else plural)


def test_text_is_english_until_a_mail_is_written_in_another_language(monkeypatch) -> None:
    said = tr("Hello {who},", who=ntr("{n} snake", "{n} snakes", 2))
    assert said == "Hello 2 snakes," and isinstance(said, Text)
    assert str(said) == "Hello 2 snakes,"
    monkeypatch.setattr("snl_pbem.i18n.catalog", lambda code: Shouting() if code != "en" else None)
    with speaking("th"):
        assert str(said) == "HELLO 2 SNAKES,"  # the value in the same language
        assert f"{said}" == "HELLO 2 SNAKES,"
    assert str(said) == "Hello 2 snakes,"
    again = pickle.loads(pickle.dumps(said))
    assert again == said and isinstance(again, Text)


def test_a_time_is_written_in_the_readers_locale() -> None:
    moment, zone = datetime(2026, 12, 5, 11, 0, tzinfo=UTC), ZoneInfo("Asia/Bangkok")
    assert local_time(moment, zone, "en") == show(moment, zone) == "Sat 5 Dec 2026 18:00 +07"
    assert local_time(moment, zone, "zh-Hans") == "2026年12月5日 周六 18:00 +07"
    assert local_time(moment, zone, "th") == "เสาร์ 5 ธ.ค. 2026 18:00 +07"
    paused = datetime(2026, 12, 5, 11, 0, 27, tzinfo=UTC)
    assert local_time(paused, zone, "zh-Hans").endswith("18:00:27 +07")
    when = When(moment, zone)
    assert when == "Sat 5 Dec 2026 18:00 +07"
    with speaking("zh-Hans"):
        assert str(when) == "2026年12月5日 周六 18:00 +07"
    assert pickle.loads(pickle.dumps(when)) == when


# -- which language a mail is written in -------------------------------------------------


def test_a_players_language_the_games_and_the_referees(post: Post) -> None:
    config = post.config
    with post.db.transaction() as s:
        game = s.scalars(select(Game)).one()
        ann, bo, chai = (
            s.scalars(select(Player).where(Player.name == n)).one() for n in ("ann", "bo", "chai")
        )
        assert mail_language(config, game, ann.email, "postal/round_report.txt.j2", ann) == "en"
        assert mail_language(config, game, bo.email, "postal/round_report.txt.j2", bo) == "zh-Hans"
        chai.language = "th"  # chosen by mail
        assert mail_language(config, game, chai.email, "postal/round_report.txt.j2", chai) == "th"
        bo.language = "en"  # by mail, over the config's
        assert mail_language(config, game, bo.email, "player/notice.txt.j2", bo) == "en"
        # the referee's mail, to anyone, is English; mail to another address the game's
        assert mail_language(config, game, chai.email, "referee/reply.txt.j2", chai) == "en"
        assert mail_language(config, game, "x@example.net", "player/list.txt.j2", chai) == "en"
        assert (
            mail_language(config, game, "x@example.net", "player/list.txt.j2", None, "th") == "th"
        )
        s.rollback()


def test_a_games_language_is_its_players_unless_they_chose(tmp_path: Path) -> None:
    post = Post(tmp_path, "th")
    welcomes = {who: post.mail(f"{who}@example.org")[0] for who in ("ann", "bo", "chai")}
    assert {w: language_of(m) for w, m in welcomes.items()} == {
        "ann": "th",
        "bo": "zh-Hans",
        "chai": "th",
    }
    assert all(language_of(m) == "en" for m in post.mail("ref@example.org"))
    post.db.dispose()


def test_language_by_mail(post: Post) -> None:
    keyed = "GAME g1\nKEY chai-key-123\n"
    assert post.send("chai@example.org", keyed + "LANGUAGE th") == "processed: language: th"
    assert post.player("chai").language == "th"
    answer = post.last("chai@example.org")
    assert language_of(answer) == "th"
    assert "[g1]" in str(answer["Subject"])
    assert post.send("chai@example.org", keyed + "LANGUAGE") == "processed: language: th (asked)"
    # a word that is no language is named on its line, and nothing changes
    post.send("chai@example.org", keyed + "LANGUAGE klingon")
    assert post.player("chai").language == "th"
    assert "klingon" in post.last("chai@example.org").get_body(("plain",)).get_content()
    # without the key, nothing changes
    post.send("chai@example.org", "GAME g1\nLANGUAGE en")
    assert post.player("chai").language == "th"
    # bo's config says Chinese; by mail he chooses English, which comes first
    assert (
        post.send("bo@example.org", "GAME g1\nKEY bo-key-1234\nLANG en")
        == "processed: language: en"
    )
    assert language_of(post.last("bo@example.org")) == "en"


def test_a_stranger_is_answered_in_the_language_they_wrote(post: Post) -> None:
    post.send("x1@example.net", "HELP\n请问怎么玩？", subject="帮助")
    post.send("x2@example.net", "HELP\nช่วยด้วยครับ", subject="ช่วย")
    post.send("x3@example.net", "HELP please")
    post.send("x4@example.net", "LIST\n有什么游戏？")
    assert language_of(post.last("x1@example.net")) == "zh-Hans"
    assert language_of(post.last("x2@example.net")) == "th"
    assert language_of(post.last("x3@example.net")) == "en"
    assert language_of(post.last("x4@example.net")) == "zh-Hans"


def test_a_join_takes_its_language_to_the_seat(post: Post) -> None:
    from mailhelpers import code_in

    post.send("x1@example.net", "JOIN g1 Dao LANGUAGE th")
    code_mail = post.last("x1@example.net")
    assert language_of(code_mail) == "th"
    code = code_in(code_mail.get_body(("plain",)).get_content())
    post.send("x1@example.net", f"CONFIRM {code}")
    with post.db.transaction() as s:
        signup = s.scalars(select(Signup).where(Signup.name == "Dao")).one()
        assert signup.language == "th"
    assert language_of(post.last("x1@example.net")) == "th"
    # written in Chinese, no LANGUAGE: the sign-up is Chinese
    post.send("x2@example.net", "JOIN g1 Mei\n我想参加")
    assert language_of(post.last("x2@example.net")) == "zh-Hans"


def test_a_bad_language_in_the_config_names_its_key(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(CONFIG.format(url=f"sqlite:///{tmp_path / 'x.db'}", language="fr"))
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    text = str(raised.value)
    assert "language" in text and "'fr'" in text and "zh-Hans" in text, text
    path.write_text(
        CONFIG.format(url=f"sqlite:///{tmp_path / 'x.db'}", language="en").replace(
            'language = "zh"', 'language = "Elvish"'
        )
    )
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert re.search(r"players\[1\]\.language|players.*language", str(raised.value)), raised.value


def test_a_template_shows_text_in_its_language_through_filters(monkeypatch) -> None:
    """``{{ x }}``, ``join``, ``string``, ``wordwrap`` and a trans block's values: Jinja takes
    a str subclass as the (English) str it is; the mail's own filters show it first."""
    import snl_pbem.mail.render as render

    monkeypatch.setattr("snl_pbem.i18n.catalog", lambda code: Shouting() if code != "en" else None)
    monkeypatch.setattr(render, "catalog", lambda code: Shouting() if code != "en" else None)
    render.environment.cache_clear()
    try:
        source = (
            "{{ one }}|{{ many|join('; ') }}|{{ one|string }}|{{ one|wordwrap(40) }}|"
            "{% trans who=one %}to {{ who }}{% endtrans %}"
        )
        values = {"one": tr("the referee"), "many": [tr("a die"), tr("a snake")]}
        with speaking("th") as code:
            text = render.environment(code).from_string(source).render(**values)
        assert text == "THE REFEREE|A DIE; A SNAKE|THE REFEREE|THE REFEREE|TO THE REFEREE"
        english = render.environment("en").from_string(source).render(**values)
        assert english == "the referee|a die; a snake|the referee|the referee|to the referee"
    finally:
        render.environment.cache_clear()


@pytest.mark.parametrize("columns", range(12, 40))
def test_a_chinese_date_is_never_cut_nor_a_line_left_on_an_opening_mark(columns: int) -> None:
    text = "你已请假到 2026年12月24日 周四 23:59 GMT：这期间没有提醒（你没下指令也不算你缺席）。"
    lines = wrap(text, columns, "zh-Hans")
    assert "".join(lines).replace(" ", "") == text.replace(" ", "")
    assert any("2026年12月24日" in line for line in lines)
    assert not any(line.endswith("（") for line in lines)


# -- every answer a player meets, in their language ------------------------------------

ANSWERED = (
    "DICE 7",  # not a die value
    "DICE ４",  # full-width: read as 4
    "DICE ๔",  # Thai digit: named, with how to write it
    "DICE 4 4",  # the wrong number of dice
    "DICE 4\nTRAPDOOR 500",  # no such space
    "TRAPDOOR 12",  # no DICE line
    "ROUND 3\nDICE 4",  # not the round open now
    "ROUND x\nDICE 4",
    "DIEC 4",  # unknown command, with a guess
    "STATUS",
    "HISTORY",
    "CLEAR",
    "ABSENT UNTIL 2020-01-01",  # a date that has passed
    "ABSENT UNTIL soon",
    "ABSENT UNTIL 2029-12-24",
    "ABSENT OFF",
    "ADDRESS ann@example.org",  # another player's
    "ADDRESS chai@exämple.org",  # non-ASCII
    "ADDRESS postmaster@example.net",  # a robot
    "ADDRESS",
    "JOIN g1 Chai",  # already playing
    "OBSERVE g1",
    "LIST",
    "HELP",
    "CONFIRM abcd-efgh",  # no code waits
    "CONFIRM",
    "EXTEND g1 BY 2d",  # the referee's
    "LANGUAGE klingon",
    "KEY (你的口令)",
    "NEW KEY",  # last: the key changes
)


@pytest.mark.parametrize("code", ["en", "zh-Hans", "th"])
def test_every_answer_a_player_meets_is_in_their_language(post: Post, code: str) -> None:
    """Each of the answers a player meets (refusals, problems on their lines, what a
    command says) comes in the player's language with no English left but the protocol,
    names and addresses: the code's own texts (snl_pbem.rules.words) are translated too."""
    from languagehelpers import english_left

    keyed = "GAME g1\nKEY chai-key-123\n"
    post.send("chai@example.org", keyed + f"LANGUAGE {code}")
    seen = len(post.mail("chai@example.org"))
    for body in ANSWERED:
        post.send("chai@example.org", keyed + body)
    answers = post.mail("chai@example.org")[seen:]
    assert len(answers) == len(ANSWERED), [str(a["Subject"]) for a in answers]  # one each
    names = ("ann", "bo", "chai", "Chai", "g1", "Three", "tongues", "klingon", "soon", "DIEC")
    names += ("SMTPUTF", "xn")  # the address problem names the protocol: SMTPUTF8, xn--
    for answer in answers:
        text = answer.get_body(("plain",)).get_content()
        assert language_of(answer) == code, text
        left = english_left(f"{answer['Subject']}\n{text}", names, subject_line=False)
        assert code == "en" or not left, (left, text)
        assert all(width(line) <= 78 for line in text.splitlines()), text


@pytest.mark.parametrize(
    "problem",
    [
        "WRONG_COUNT:2:1",
        "NOT_A_DIE:7",
        "ALREADY_USED:4:1,2",
        "ALREADY_USED:4:",
        "REPEATED:5",
    ],
)
def test_a_dice_problem_kept_as_english_is_read_back_in_every_language(problem: str) -> None:
    """An order's dice problems are stored as their English (the referee's tools read
    them); a reminder or a report shows them again to their player, in the player's
    language: each kind's English is read back into words (rules.words.reread), not left
    English because its wording and the pattern that reads it drifted apart."""
    from snl_pbem.rules.postal.dice import DiceProblem, DiceProblemKind
    from snl_pbem.rules.words import reread

    name, *rest = problem.split(":")
    kind = DiceProblemKind[name]
    if kind is DiceProblemKind.WRONG_COUNT:
        made = DiceProblem(kind, value=int(rest[1]), expected=int(rest[0]))
    elif kind is DiceProblemKind.ALREADY_USED:
        left = tuple(int(v) for v in rest[1].split(",") if v)
        made = DiceProblem(kind, int(rest[0]), 0, open=left)
    else:
        made = DiceProblem(kind, int(rest[0]), 0)
    kept = str(made)  # as the database keeps it
    again = reread(kept)
    assert isinstance(again, Text) and str(again) == kept
    for code in ("zh-Hans", "th"):
        with speaking(code):
            assert str(again) == str(made.text()) != kept, (code, kept)


@pytest.mark.parametrize("code", ["en", "zh-Hans", "th"])
def test_a_line_problem_never_wraps_to_a_line_a_paste_would_obey(code: str) -> None:
    """A line problem's reason names commands ("write ABSENT UNTIL 2026-12-24 ... or
    ABSENT OFF", "e.g. ROUND 8"): wrapped to fit the mail, no line of it may start with
    a command word, since a player pasting part of our answer back would send it."""
    from snl_pbem.mail.commands import read_commands
    from snl_pbem.mail.quotes import COMMAND_WORDS
    from snl_pbem.mail.render import environment

    reasons = [
        tr("write ABSENT UNTIL 2026-12-24 (a date, year first) or ABSENT OFF"),
        tr("TRAPDOOR needs a space number, e.g. TRAPDOOR 37"),
        tr("ROUND needs a round number, e.g. ROUND 8"),
        tr("GAME needs the game's id, e.g. GAME spring26"),
        tr("write EXTEND spring26 BY 2d (a duration: 12h, 2d, 1w)"),
        tr("CONFIRM needs the code we mailed you, e.g. CONFIRM abcd-efgh"),
    ]
    echoed = environment(code).filters["echoed"]
    for line in ("ABSENT zz", "TRAPDOOR abcdefghijklmnopq", "ROUND x", "GAME ??", "X" * 30):
        for reason in reasons:
            for columns in (40, 56, 72):
                with speaking(code):
                    text = echoed(line, reason, columns)
                for shown in text.splitlines():
                    first = shown.split()[0].rstrip(":=,.;").upper()
                    assert first not in COMMAND_WORDS, (code, text)
                read = read_commands(text.splitlines(), 0, None)
                assert not read.actions and not read.problems, text
                assert (read.game, read.round, read.dice, read.nomination) == (None,) * 4, text


def test_an_ascii_key_may_start_with_a_bracket() -> None:
    """The config allows any printable key without spaces: "(secret1)" is a key; only the
    help's placeholder written in Chinese or Thai in one word is chat."""
    from snl_pbem.mail.commands import read_commands

    assert read_commands(["KEY (secret1)"], 0, None).order_keys == ("(secret1)",)
    assert read_commands(["KEY <letmein>"], 0, None).order_keys == ("<letmein>",)
    assert read_commands(["KEY (你的口令)"], 0, None).order_keys == ()
    assert read_commands(["KEY (รหัสผ่านของคุณ)"], 0, None).order_keys == ()


def test_a_join_refusal_is_in_the_language_the_join_asks_for(post: Post) -> None:
    post.send("nok@else.example", "JOIN g1 chai LANGUAGE th")  # a name already taken
    answer = post.last("nok@else.example")
    assert language_of(answer) == "th"
    post.send("lin@else.example", "JOIN g1 Lin!!?? LANGUAGE zh")  # no such name
    assert language_of(post.last("lin@else.example")) == "zh-Hans"
