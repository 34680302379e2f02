"""A classic game (RULES-CLASSIC.md) by email, through ``ingest`` and ``close_round`` on
SQLite and PostgreSQL: the welcome explains the options, ROLL is the order and dice are
refused (C12), every report shows every throw and the counts (C10, C11), the game-over
mail the finishing order (C9), and a rollback closed again throws the same (C11)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from mailhelpers import OPENED, T0, mail_to
from sqlalchemy import select

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.intake import ingest
from snl_pbem.app.rounds import close_round, rollback_round
from snl_pbem.app.schedule import all_in_close_at
from snl_pbem.config import load_config
from snl_pbem.errors import ConfigError
from snl_pbem.rules.words import counted
from snl_pbem.store import Database, Game, Round, RoundTally
from snl_pbem.store.migrate import upgrade

CONFIG = """
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
{options}
players = [
  {{ name = "ann", email = "ann@example.org", key = "ann-key-123" }},
  {{ name = "bob", email = "bob@example.org", key = "bob-key-123" }},
  {{ name = "cy", email = "cy@example.org", key = "cy-key-1234" }},
]
"""
OPTIONS = """
start_rule = "max_to_enter"
enter_on = "square1"
max_roll = "roll_again"
bump = true
finish = "all"
"""


def setup(db, tmp_path, options: str = OPTIONS):
    path = tmp_path / "config.toml"
    path.write_text(CONFIG.format(url=db.url, options=options))
    config = load_config(path)
    sync_games(db, config, T0)
    start_game(db, config, "c1", OPENED)
    return config


def mail(tag: str, body: str, sender: str = "ann@example.org") -> bytes:
    return (
        f"From: {sender}\r\nTo: snl@example.org\r\nSubject: [c1] orders\r\n"
        f"Message-ID: <{tag}@example.org>\r\n\r\nGAME c1\r\n{body}\r\n"
    ).encode()


def records(db) -> list[dict]:
    with db.transaction() as s:
        return [dict(r.record) for r in s.scalars(select(RoundTally).order_by(RoundTally.id))]


def test_a_classic_game_by_email_from_welcome_to_finishing_order(db, tmp_path) -> None:
    config = setup(db, tmp_path)
    [welcome] = mail_to(db, "ann@example.org", "welcome")
    welcome = " ".join(welcome.split())  # the rules are a list of wrapped items
    for plain in (
        "You need a 6 to start, placed on square 1 (a snake or ladder there acts), and "
        "your turn ends there. A piece back at the start (down a snake to 0, bumped) needs "
        "a 6 again.",
        "Throw a 6 and you throw again",
        "Land where another piece stands and it goes back to the start.",
        "Play goes on until everyone has finished",
        "Reaching or passing 12 finishes.",
        "ROLL",
    ):
        assert plain in welcome, plain
    assert "DICE" not in welcome and "trapdoor" not in welcome.lower()

    # C12: ROLL is noted; dice are refused with the reason; neither changes the throws
    result = ingest(db, config, mail("a1", "KEY ann-key-123\r\nROLL"), T0, "t")
    assert (result.status, result.detail) == ("processed", "orders for round 1 (ROLL)")
    assert "your ROLL is noted" in mail_to(db, "ann@example.org", "ack")[0]
    ingest(db, config, mail("b1", "KEY bob-key-123\r\nDICE 6", "bob@example.org"), T0, "t")
    assert not mail_to(db, "bob@example.org", "ack")  # dice alone are no orders here (C12)
    [refusal] = mail_to(db, "bob@example.org", "notice")
    assert '"DICE 6": in this game the server throws everyone\'s dice' in refusal
    assert "Your message had no orders (no ROLL line); none are needed" in refusal
    # a ROLL stays a ROLL when a DICE line or a TRAPDOOR NONE comes with it
    ingest(db, config, mail("a2", "KEY ann-key-123\r\nROLL\r\nDICE 7x\r\nTRAPDOOR NONE"), T0, "t")
    second = mail_to(db, "ann@example.org", "ack")[-1]
    assert "your ROLL is noted" in second
    assert '"DICE 7x": in this game the server throws' in second
    assert '"TRAPDOOR NONE": this game has no trapdoors' in second
    assert "not a die value" not in second and "one value per turn" not in second
    assert all_in_close_at(db, "c1", T0) is None  # cy has not said ROLL, bob only dice
    # numbers after ROLL are not read (it still says "I am here"); no order lines at all
    # get the classic wording, not the postal one
    result = ingest(
        db, config, mail("c1", "KEY cy-key-1234\r\nROLL 6 6", "cy@example.org"), T0, "t"
    )
    assert result.detail == "orders for round 1 (ROLL)"
    [rolled] = mail_to(db, "cy@example.org", "ack")
    said = " ".join(rolled.split())  # (a line problem wraps under 78 columns)
    assert '"ROLL 6 6": the numbers after ROLL are not read: the server throws the dice' in said
    ingest(db, config, mail("c2", "KEY cy-key-1234\r\nHello!", "cy@example.org"), T0, "t")
    [notice] = mail_to(db, "cy@example.org", "notice")
    assert "Your message had no orders (no ROLL line); none are needed" in notice
    assert "DICE" not in notice
    assert "the round closes early once everyone still racing has" in welcome

    day = timedelta(days=1)
    now = T0 + timedelta(days=40)
    closes = []
    while True:
        outcome = close_round(db, "c1", now, config=config)
        assert outcome is not None
        closes.append(outcome)
        now += day
        if outcome.next_round is None:
            break
        assert len(closes) < 200, "the game never ended"
    kept = records(db)
    assert len(kept) == len(closes)
    # every report shows every throw of its round, in play order, to every player
    reports = mail_to(db, "cy@example.org", "report")
    assert len(reports) == len(closes) - 1
    for report, record in zip(reports, kept, strict=False):
        for throw in record["round"]["throws"]:
            line = f"{throw['player']} threw {'+'.join(map(str, throw['dice']))}: "
            assert line + f"{throw['from']} -> {throw['to']}" in report
        assert "Counts (rolls, ladders, snakes, bumps given/taken):" in report
    [game_over] = mail_to(db, "bob@example.org", "game-over")
    order = kept[-1]["state"]["finished"]
    assert [name for name, _ in order] and len(order) == 3  # C9: everyone finished
    assert f"Game over: the finishing order is {order[0][0]} (round {order[0][1]}" in game_over
    for throw in kept[-1]["round"]["throws"]:
        assert f"{throw['player']} threw" in game_over
    with db.transaction() as s:
        game = s.scalar(select(Game).where(Game.name == "c1"))
        assert game.state == "over" and [o["player"] for o in game.result["order"]] == [
            name for name, _ in order
        ]
        assert game.options["bump"] is True and game.options["dice"] == "1d6"
    # the status reply shows the player's counts
    ingest(db, config, mail("s1", "KEY cy-key-1234\r\nSTATUS", "cy@example.org"), now, "t")
    [status] = mail_to(db, "cy@example.org", "status")
    rolls = kept[-1]["state"]["records"]["cy"]["rolls"]
    assert f"Your counts: {rolls} rolls" in status
    assert "Your record in classic games here: 1 played" in status


def test_a_rolled_back_round_closed_again_throws_the_same(db, tmp_path) -> None:
    """C11: "The server throws the dice, from a per-game seed kept in the database, so a
    game can be replayed and audited"."""
    config = setup(db, tmp_path)
    now = T0 + timedelta(days=40)
    for _ in range(3):
        assert close_round(db, "c1", now, config=config) is not None
        now += timedelta(days=1)
    first = records(db)
    assert rollback_round(db, "c1", now) == 3
    assert records(db) == first[:2]
    again = close_round(db, "c1", now, actor="referee", config=config)
    assert again is not None and again.round == 3
    assert records(db) == first


def test_close_when_all_in_waits_only_for_those_still_racing(db, tmp_path) -> None:
    """C12: ROLL "counts for close_when_all_in"."""
    config = setup(db, tmp_path, options='finish = "all"')
    for who, key in (("ann", "ann-key-123"), ("bob", "bob-key-123")):
        ingest(db, config, mail(f"{who}1", f"KEY {key}\r\nROLL", f"{who}@example.org"), T0, "t")
    assert all_in_close_at(db, "c1", T0) is None
    ingest(db, config, mail("cy1", "KEY cy-key-1234\r\nROLL", "cy@example.org"), T0, "t")
    assert all_in_close_at(db, "c1", T0) is not None


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ('bump = "yes"', "games[0].bump: 'yes' is not true or false"),
        ('dice = "9d6"', "games[0].dice: '9d6'"),
        ("reenter_needs_max = true", "games[0].reenter_needs_max: true needs max_roll"),
        ('ending = "never"', "games[0].ending: 'never' is not one of"),
        ("trapdoors = 3", "games[0].trapdoors"),
    ],
)
def test_a_bad_classic_option_is_a_config_error_naming_the_key(
    tmp_path, options: str, named: str
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(CONFIG.format(url="sqlite:///x.db", options=options))
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert named in str(error.value), str(error.value)


def test_a_classic_board_with_a_snake_on_its_last_space_is_refused(tmp_path) -> None:
    path = tmp_path / "config.toml"
    text = CONFIG.format(url="sqlite:///x.db", options="").replace('"11" = 2', '"12" = 2')
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert (
        "games[0].board: snake 12\u21922: a classic board has no snake or ladder on its "
        "last space 12 (C4)" in str(error.value)
    )


def test_a_classic_option_in_a_postal_game_is_refused(tmp_path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        CONFIG.format(url="sqlite:///x.db", options="bump = true")
        .replace('ruleset = "classic"', 'ruleset = "postal"')
        .replace('"11" = 2', '"10" = 2')
    )
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert (
        "games[0].bump: an option of the classic game, and this game's ruleset is "
        '"postal" (set ruleset = "classic"' in str(error.value)
    )


def test_each_players_record_across_classic_games(db, tmp_path) -> None:
    """web: "大厅底部显示总局数、赢的局数、最快几回合获胜和累计爬梯滑蛇次数" (games, games won,
    the fastest win in rounds, ladders climbed and snakes slid, in total)."""
    games = CONFIG + "[[games]]" + CONFIG.split("[[games]]")[1].replace('id = "c1"', 'id = "c2"')
    path = tmp_path / "config.toml"
    path.write_text(games.format(url=db.url, options='finish = "first"'))
    config = load_config(path)
    sync_games(db, config, T0)
    winners = {}
    for game_name in ("c1", "c2"):
        start_game(db, config, game_name, OPENED)
        now = T0 + timedelta(days=40)
        while (outcome := close_round(db, game_name, now, config=config)).next_round:
            now += timedelta(days=1)
        winners[game_name] = (outcome.adjudication.result.winners[0], outcome.round)
    with db.transaction() as s:
        kept = {
            g.name: s.scalar(
                select(RoundTally.record)
                .join(Round)
                .where(Round.game_id == g.id, Round.number == g.rounds_played)
            )
            for g in s.scalars(select(Game))
        }
    for who in ("ann", "bob", "cy"):
        over = mail_to(db, f"{who}@example.org", "game-over")
        assert len(over) == 2
        won = [g for g, (name, _) in winners.items() if name == who]
        ladders = sum(kept[g]["state"]["records"][who]["ladders"] for g in kept)
        snakes = sum(kept[g]["state"]["records"][who]["snakes"] for g in kept)
        fastest = min((winners[g][1] for g in won), default=None)
        record = f"Your record in classic games here: 2 played, {len(won)} won"
        if fastest:
            record += f" (fastest in {counted(fastest, 'round')})"
        climbed = f"{counted(ladders, 'ladder')} climbed, {counted(snakes, 'snake')} slid"
        assert record in over[1] and climbed in over[1]
        assert "Your record in classic games here: 1 played" in over[0]


def test_the_seed_is_drawn_once_and_kept_unless_the_config_gives_one(db, tmp_path) -> None:
    """C11: "a per-game seed kept in the database": without a seed in the config it is
    drawn at random (a game id used again elsewhere must not replay the same throws) and
    never changes after; a seed in the config is used as given."""
    config = setup(db, tmp_path)
    with db.transaction() as s:
        drawn = s.scalar(select(Game.seed).where(Game.name == "c1"))
    assert drawn
    report = sync_games(db, config, T0 + timedelta(days=1))
    assert not [line for line in report.lines if "seed" in line]
    with db.transaction() as s:
        assert s.scalar(select(Game.seed).where(Game.name == "c1")) == drawn
    other = tmp_path / "other"
    other.mkdir()
    second = Database(f"sqlite:///{other / 'x.db'}")
    upgrade(second)
    try:
        setup(second, other)
        with second.transaction() as s:
            assert s.scalar(select(Game.seed).where(Game.name == "c1")) != drawn
    finally:
        second.dispose()
    given = tmp_path / "given"
    given.mkdir()
    path = given / "config.toml"
    path.write_text(CONFIG.format(url=f"sqlite:///{given / 'x.db'}", options="seed = 42"))
    third = Database(f"sqlite:///{given / 'x.db'}")
    upgrade(third)
    try:
        sync_games(third, load_config(path), T0)
        with third.transaction() as s:
            assert s.scalar(select(Game.seed).where(Game.name == "c1")) == 42
    finally:
        third.dispose()


def test_the_reveal_after_a_classic_game_lists_every_throw(db, tmp_path) -> None:
    config = setup(db, tmp_path, options="reveal_after_game = true")
    now = T0 + timedelta(days=40)
    while close_round(db, "c1", now, config=config).next_round:
        now += timedelta(days=1)
    [over] = mail_to(db, "ann@example.org", "game-over")
    assert "Round by round (every throw):" in over and "  Round 1:" in over
    for throw in records(db)[0]["round"]["throws"]:
        assert f"    {throw['player']} threw {'+'.join(map(str, throw['dice']))}: " in over
