"""``snl-pbem demo``: a whole game by email on this machine, in under a minute.

It runs the real ``serve`` machinery: a SQLite database in a folder, the
built-in SMTP receiver on loopback as the game address, and an SMTP sink
standing in for the players' mailboxes, which writes every message it is
given to ``DIR/mail/<player>/`` as an ``.eml`` file.

The game takes its players by email: the config lists none (``signup = "open"``,
``max_players`` = the number of bots, ``starts = "when_full"``; a game may also mix
config-listed players with sign-ups, the demo shows the mail side only). One bot sends
LIST; each sends ``JOIN demo <name>``, reads the code the server mails back from its
mailbox folder and replies ``CONFIRM <code>``; the last seat starts the game, and each
bot reads its order key from its welcome mail. Then one more bot asks for a name
already taken (and is told so), joins under its own and goes on the standby list.
The config's first deadline is the moment it was written, so it has passed when the
game fills: round 1's deadline is one round length after the start (a game that takes
sign-ups and starts late is shifted that way), and the later rounds follow.

Then scripted players email their orders — most of them correctly; one repeats a die
(R18); two nominate the same trapdoor; one never writes (R17) — deadlines pass every
few seconds, reports go out, and the game plays to its end.

``--ruleset classic`` plays the classic game (RULES-CLASSIC.md) the same way, with
finish = "all", bump and roll-again on: the server throws, most bots send ROLL, one
sends dice (and is told the server throws), one never writes. Such a game can last
anything from a dozen rounds to sixty, so the demo sets the game's ``seed`` (the
server's dice, C11): the first from ``--seed`` on whose game, replayed offline with the
same dice, ends within CLASSIC_MOST_ROUNDS rounds (a real game draws its seed at random).
"""

from __future__ import annotations

import email
import email.policy
import random
import re
import shutil
import smtplib
import socket
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import make_msgid
from pathlib import Path
from typing import TextIO

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP as SMTPServer
from aiosmtpd.smtp import Envelope, Session

from snl_pbem.app.games import sync_games
from snl_pbem.app.outbox import sent_count
from snl_pbem.app.referee import status
from snl_pbem.app.rounds import CloseOutcome
from snl_pbem.config import load_config
from snl_pbem.mail.parse import code_given, order_key_given
from snl_pbem.offline.classic_replay import parse_classic_replay, run_classic
from snl_pbem.rules.classic.ruleset import throw_line
from snl_pbem.rules.outcome import ranked
from snl_pbem.rules.postal.dice import open_values, used_in_set
from snl_pbem.rules.words import counted
from snl_pbem.runners.sending import configure_logging
from snl_pbem.runners.server import Server
from snl_pbem.site.writer import Site
from snl_pbem.store import Database
from snl_pbem.store.migrate import upgrade
from snl_pbem.store.states import GamePhase, MailKind

MOST_PLAYERS = 8
NAMES = ("ann", "bob", "cy", "dee", "eve", "fay", "gus", "hal", "ida")
"""The players (8 at most), and one more who joins once the game is full."""
ADDRESS = "snl@demo.example"
BOARD = (
    '{ rows = 4, columns = 10, ladders = { "3" = 13, "8" = 22, "17" = 29 }, '
    'snakes = { "27" = 9, "34" = 15 }, '
    'family = [ { kind = "snake", row = 4, last_digit = 9, shift = -10 } ] }'
)
ROUND_LENGTH_S = 4
CLASSIC_ROUND_LENGTH_S = 2
"""The classic game's bots need not answer (the server throws), and one piece plays on
alone at the end (finish = "all"): shorter rounds keep it as quick as the postal demo."""
CLASSIC_MOST_ROUNDS = 15
"""The classic demo's game ends within this many rounds (its seed is chosen so)."""
CLASSIC_SEEDS_TRIED = 200
"""Seven or eight pieces rarely all finish within CLASSIC_MOST_ROUNDS: the quickest of
this many seeds then (a few hundredths of a second each)."""
MAIL_WAIT_S = 30.0
"""How long a bot waits for an answer in its mailbox (a hang detector: it takes well
under a second)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Mailboxes:
    """The sink's handler: every delivered message becomes DIR/mail/<local part>/NNN.eml."""

    root: Path
    count: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle_DATA(self, server: SMTPServer, session: Session, envelope: Envelope) -> str:
        raw = envelope.original_content or b""
        head = email.message_from_bytes(raw.partition(b"\r\n\r\n")[0], policy=email.policy.default)
        # the subject as its reader sees it ("[demo] Round 3 report", "[demo] 第 3 轮战报")
        slug = re.sub(r"[^\w\u0e00-\u0e7f]+", "-", str(head["Subject"] or "message").lower())
        slug = slug.strip("-_")[:50]
        with self.lock:
            for rcpt in envelope.rcpt_tos:
                self.count += 1
                box = self.root / rcpt.split("@")[0].lower()
                box.mkdir(parents=True, exist_ok=True)
                path = box / f"{self.count:03d}-{slug}.eml"
                part = path.with_suffix(".part")  # a reader never sees half a message
                part.write_bytes(raw)
                part.replace(path)
        return "250 2.0.0 Delivered to the demo mailbox"


CLASSIC_OPTIONS = """ruleset = "classic"
max_roll = "roll_again"
bump = true
finish = "all"
"""


def classic_seed(names: tuple[str, ...], start: int) -> int:
    """The first seed from ``start`` on whose classic game (the demo's board and options,
    ``names`` seated in this order) ends within CLASSIC_MOST_ROUNDS rounds, or else the
    quickest of the CLASSIC_SEEDS_TRIED (with many players): the server throws the same
    dice (C11) as this offline replay."""
    replay = {
        "ruleset": "classic",
        "board": tomllib.loads(f"board = {BOARD}")["board"],
        "players": list(names),
        **tomllib.loads(CLASSIC_OPTIONS.replace('ruleset = "classic"\n', "")),
    }
    quickest, fewest = start, None
    for seed in range(start, start + CLASSIC_SEEDS_TRIED):
        outcome = run_classic(parse_classic_replay({**replay, "seed": seed}))
        rounds = len(outcome.rounds)
        if not outcome.state.over:
            continue
        if rounds <= CLASSIC_MOST_ROUNDS:
            return seed
        if fewest is None or rounds < fewest:
            quickest, fewest = seed, rounds
    return quickest


def write_config(
    folder: Path,
    names: tuple[str, ...],
    receiver: int,
    sink: int,
    ruleset: str = "postal",
    seed: int = 1,
) -> Path:
    # the first deadline has passed when the last seat is taken: round 1's deadline is then
    # one round length after the start (start_locked's shift_late_start)
    first = datetime.now(UTC)
    rules = (
        CLASSIC_OPTIONS + f"seed = {classic_seed(names, seed)}\n"
        if ruleset == "classic"
        else "double_from_round = 4\n"
    )
    length = CLASSIC_ROUND_LENGTH_S if ruleset == "classic" else ROUND_LENGTH_S
    text = f"""# Written by snl-pbem demo.
timezone = "UTC"
log_level = "warning"
[database]
url = "sqlite:///{folder / "demo.db"}"
backups = 2
[mail]
address = "{ADDRESS}"
referee = "referee@demo.example"
replies_per_hour = 100
[mail.lmtp]
host = "127.0.0.1"
port = {receiver}
protocol = "smtp"
redelivery_grace = "0s"  # no MTA queues mail for the demo: rounds close on time
etrn_server = ""  # and there is none to ask for it
[mail.smtp]
host = "127.0.0.1"
port = {sink}
tls = "none"
[[games]]
id = "demo"
title = "Demo game"
board = {BOARD}
first_deadline = "{first.isoformat(timespec="seconds")}"
round_length = "{length}s"
{rules}reveal_after_game = true
signup = "open"
min_players = {len(names)}
max_players = {len(names)}
starts = "when_full"
[web]
dir = "{folder / "site"}"
"""
    path = folder / "config.toml"
    path.write_text(text)
    return path


@dataclass
class Bot:
    """A scripted player who keeps their own record of the dice they used."""

    name: str
    style: str  # "careful", "repeater" (repeats a die once), "silent" (never writes)
    rng: random.Random
    key: str = ""
    """The order key, as the bot's welcome mail gave it."""
    used: list[int] = field(default_factory=list)
    repeated: bool = False

    def orders(self, number: int, turns: int, trapdoor: int | None) -> str | None:
        if self.style == "silent":
            return None
        if self.style == "roller":  # the classic game: "I am here" (C12)
            return f"GAME demo\r\nKEY {self.key}\r\nROLL\r\n"
        if self.style == "chooser":  # the classic game: dice are refused (C12)
            return f"GAME demo\r\nKEY {self.key}\r\nDICE 6\r\n"
        in_set = used_in_set(self.used)
        if self.style == "repeater" and not self.repeated and in_set:
            self.repeated = True
            dice = [in_set[0]] * turns  # the same value again: R18, the referee moves instead
        else:
            dice = []
            for _ in range(turns):  # a value still open in the set (R6), by the rules' count
                dice.append(self.rng.choice(open_values([*self.used, *dice])))
        lines = [
            "Hi referee,",
            "",
            "GAME demo",
            f"KEY {self.key}",
            f"ROUND {number}",
            "DICE " + " ".join(map(str, dice)),
        ]
        if trapdoor is not None:
            lines.append(f"TRAPDOOR {trapdoor}")
        return "\r\n".join([*lines, "", "Thanks!", "-- ", self.name])

    def learn(self, dice: list[int]) -> None:
        """What the referee actually played for us (from our own report's 'Used' line)."""
        self.used.extend(dice)


def run_demo(
    directory: Path | None = None,
    players: int = 4,
    seed: int = 1,
    out: TextIO | None = None,
    patience: float = 90.0,
    ruleset: str = "postal",
) -> int:
    classic = ruleset == "classic"
    out = out or sys.stdout
    folder = directory or Path(tempfile.mkdtemp(prefix="snl-demo-"))
    folder.mkdir(parents=True, exist_ok=True)
    for stale in ("demo.db", "demo.db-wal", "demo.db-shm", "mail", "backups", "site"):
        target = folder / stale
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    names = NAMES[: max(2, min(players, MOST_PLAYERS))]
    late = NAMES[len(names)]  # joins once the game is full: the standby list
    rng = random.Random(seed)
    receiver_port, sink_port = free_port(), free_port()
    config_path = write_config(folder, names, receiver_port, sink_port, ruleset, seed)
    configure_logging("warning")
    mailboxes = Mailboxes(folder / "mail")
    sink = Controller(mailboxes, hostname="127.0.0.1", port=sink_port)
    sink.start()

    config = load_config(config_path)
    db = Database(config.database_url)
    upgrade(db)

    sync_games(db, config, datetime.now(UTC))
    last = config.game("demo").board.last

    closes: list[CloseOutcome] = []
    server = Server(config_path, on_close=closes.append)
    runner = threading.Thread(
        target=server.serve_forever, kwargs={"install_signals": False}, name="serve", daemon=True
    )
    runner.start()
    if not server.ready.wait(30):
        print("The server did not start (see the messages above).", file=out)
        sink.stop()
        return 1
    styles = {names[-1]: "silent", names[1]: "chooser" if classic else "repeater"}
    usual = "roller" if classic else "careful"
    bots = [Bot(n, styles.get(n, usual), random.Random(rng.random())) for n in names]
    cast = (
        f"  the server throws everyone's dice (classic rules: roll again on a 6, bumps, "
        f"everyone plays to the finish); {names[1]} sends dice anyway and is told why not, "
        f"{names[-1]} never writes.\n"
        if classic
        else f"  {names[1]} will repeat a die once (R18), {names[-1]} never writes (R17), "
        f"{names[0]} and {names[2 % len(names)]} vote for the same trapdoors.\n"
    )
    print(
        f"snl-pbem demo: {len(names)} players on a {last}-space board, a deadline every "
        f"{CLASSIC_ROUND_LENGTH_S if classic else ROUND_LENGTH_S}s.\nFolder: {folder}\n" + cast,
        file=out,
    )
    mail = Mail(folder / "mail", receiver_port)
    seen_closes = 0
    sent_for = 0
    late_done = False
    try:
        _sign_up(mail, bots, db, out)
        started = time.monotonic()
        while time.monotonic() - started < patience:
            while seen_closes < len(closes):  # first learn what the referee played
                outcome = closes[seen_closes]
                seen_closes += 1
                if classic:
                    _progress_classic(outcome, last, out)
                else:
                    _learn(bots, outcome)
                    _progress(outcome, last, out)
            [game] = status(db, "demo")
            if game.state == GamePhase.OVER:
                break
            if game.round is not None and game.round != sent_for and game.round == seen_closes + 1:
                _send_orders(bots, game.round, game.round_turns or 1, last, receiver_port, rng)
                sent_for = game.round
            if not late_done:  # round 1's orders are in: now one more asks to join
                _late_join(mail, late, names[1], out)
                late_done = True
            time.sleep(0.2)
        while seen_closes < len(closes):
            (_progress_classic if classic else _progress)(closes[seen_closes], last, out)
            seen_closes += 1
        _wait_for_mail(lambda: sent_count(db, MailKind.GAME_OVER), len(names), 15)
        site = Site(db, config, lambda: datetime.now(UTC))  # the server keeps the pages
        _wait_for_mail(lambda: int(not site.behind()), 1, 15)
    except DemoError as exc:
        print(f"The demo stopped: {exc}.", file=out)
        return 1
    finally:
        server.stop_event.set()
        runner.join(30)
        sink.stop()
        db.dispose()
    [game] = status(Database(config.database_url), "demo")
    if game.state != GamePhase.OVER:
        print(f"The game did not finish within {patience:.0f}s.", file=out)
        return 1
    result = game.result or {}
    if "order" in result:
        verdict = "the finishing order is " + ", ".join(
            f"{o['player']} (round {o['round']})" for o in result["order"]
        )
    elif "winner" in result:
        verdict = f"the winner is {result['winner']}"
    else:
        verdict = "a draw between " + ", ".join(result.get("draw", []))
    print(f"\nGame over after {counted(len(closes), 'round')}: {verdict}.", file=out)
    print(
        f"Every message is in {folder / 'mail'} ({counted(mailboxes.count, '.eml file')}, "
        "one folder per player and one for the referee); open them with any mail client.",
        file=out,
    )
    print(
        f"The referee's config is {config_path}; try: snl-pbem status --config {config_path}",
        file=out,
    )
    assert config.settings.web is not None
    print(
        "The game's web pages (standings, the race chart, "
        + ("every throw" if classic else "the board revealed")
        + "): open "
        f"file://{config.settings.web.dir / 'index.html'} in a browser",
        file=out,
    )
    return 0


class DemoError(Exception):
    """A step that did not happen (the message says which): the demo stops."""


@dataclass
class Mail:
    """The bots' mail client: it sends to the game address and reads their mailbox folders
    (the sink's DIR/mail/<name>/), each message once."""

    root: Path
    port: int
    read: set[Path] = field(default_factory=set)

    def send(self, who: str, body: str) -> None:
        raw = (
            f"From: {who.title()} <{who}@demo.example>\r\nTo: {ADDRESS}\r\nSubject: demo\r\n"
            f"Message-ID: {make_msgid(who, 'demo.example')}\r\n"
            "Content-Type: text/plain; charset=utf-8\r\n\r\n" + body + "\r\n"
        )
        with smtplib.SMTP("127.0.0.1", self.port, timeout=30) as client:
            client.sendmail(f"{who}@demo.example", [ADDRESS], raw.encode())

    def wait(self, who: str, subject: str, seconds: float = MAIL_WAIT_S) -> str:
        """The text of the next unread message to ``who`` whose subject holds ``subject``."""
        box = self.root / who
        deadline = time.monotonic() + seconds
        while True:
            for path in sorted(box.glob("*.eml")) if box.is_dir() else []:
                if path in self.read:
                    continue
                message = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
                if subject.lower() in str(message["Subject"]).lower():
                    self.read.add(path)
                    body = message.get_body(("plain",))
                    return str(body.get_content()) if body is not None else ""
            if time.monotonic() > deadline:
                raise DemoError(f"no mail {subject!r} came to {who} within {seconds:.0f}s")
            time.sleep(0.05)


def _code(text: str) -> str:
    """The code a code mail gives in a sentence (its example line says "CONFIRM (your
    code)", so that no copy of our mail confirms anything)."""
    code = code_given(text)
    if code is None:
        raise DemoError("a code mail gives no confirmation code")
    return code


def _first_line(text: str) -> str:
    """The first line of an answer after its greeting."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return next((line for line in lines if not line.startswith("Hello")), "")


def _sign_up(mail: Mail, bots: list[Bot], db: Database, out: TextIO) -> None:
    """LIST, then each bot JOINs, reads its code and CONFIRMs it; the last seat starts
    the game; each bot reads its order key from its welcome mail."""
    seats, first = len(bots), bots[0].name
    width = max(len(bot.name) for bot in bots)
    print(
        f"Sign-up by email (the config lists no players; {seats} seats, the game starts "
        "when full):",
        file=out,
    )
    mail.send(first, "LIST")
    listing = mail.wait(first, "the games on this server")
    forming = re.search(r"^\s*(Forming: .*)$", listing, re.MULTILINE)
    if forming is None:
        raise DemoError("the LIST answer shows no game forming")
    print(f'  {first} sends LIST; the answer shows "demo ... {forming.group(1)}"', file=out)
    for bot in bots:
        mail.send(bot.name, f"JOIN demo {bot.name}")
    print(
        f"  {', '.join(bot.name for bot in bots)} each send JOIN demo <name>, and each gets a "
        "code by mail",
        file=out,
    )
    for number, bot in enumerate(bots, 1):
        code = _code(mail.wait(bot.name, "Your confirmation code"))
        mail.send(bot.name, f"CONFIRM {code}")
        answer = mail.wait(bot.name, "You have a seat")
        full = number == seats
        if full != ("has started" in answer):
            raise DemoError(
                f"seat {number} of {seats} {'did not start' if full else 'started'} the game"
            )
        print(
            f"  {bot.name:<{width}} replies CONFIRM {code}: seat {number}/{seats}"
            + (" - game full: started" if full else ""),
            file=out,
        )
    for bot in bots:
        welcome = mail.wait(bot.name, "your order key")
        key = order_key_given(welcome)
        if key is None:
            raise DemoError(f"{bot.name}'s welcome mail gives no order key")
        bot.key = key
    if len(bots) >= 3:  # two choose their language (issue 25): all their mail from now on
        for bot, code in ((bots[0], "th"), (bots[2], "zh")):
            mail.send(bot.name, f"GAME demo\r\nKEY {bot.key}\r\nLANGUAGE {code}")
        print(
            f"  {bots[0].name} sends LANGUAGE th and {bots[2].name} LANGUAGE zh: their mail "
            "is in Thai and Chinese from now on",
            file=out,
        )
    [game] = status(db, "demo")
    due = (game.deadline - datetime.now(UTC)).total_seconds() if game.deadline else 0.0
    print(
        f"  each reads their order key in their welcome mail; round 1's deadline is in "
        f"{max(due, 0):.0f}s",
        file=out,
    )


def _late_join(mail: Mail, late: str, taken: str, out: TextIO) -> None:
    """One more asks for a name already taken, then joins as themselves: standby."""
    mail.send(late, f"JOIN demo {taken}")
    print(
        f'  {late} sends JOIN demo {taken}: "{_first_line(mail.wait(late, "request"))}"', file=out
    )
    mail.send(late, f"JOIN demo {late}")
    code = _code(mail.wait(late, "Your confirmation code"))
    mail.send(late, f"CONFIRM {code}")
    mail.wait(late, "standby list")
    print(
        f"  {late} joins as {late}, replies CONFIRM {code}: the game is full, so "
        f"{late} is on the standby list\n",
        file=out,
    )


def _send_orders(
    bots: list[Bot], number: int, turns: int, last: int, port: int, rng: random.Random
) -> None:
    shared_trap = rng.randint(last // 3, last - 2)  # two bots gang up on one space
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        for index, bot in enumerate(bots):
            trapdoor = shared_trap if index in (0, 2) else None
            text = bot.orders(number, turns, trapdoor)
            if text is None:
                continue
            raw = (
                f"From: {bot.name.title()} <{bot.name}@demo.example>\r\nTo: {ADDRESS}\r\n"
                f"Subject: [demo] orders for round {number}\r\n"
                f"Message-ID: <{bot.name}.{number}.{rng.getrandbits(32)}@demo.example>\r\n"
                "Content-Type: text/plain; charset=utf-8\r\n\r\n" + text + "\r\n"
            )
            client.sendmail(f"{bot.name}@demo.example", [ADDRESS], raw.encode())


def _learn(bots: list[Bot], outcome: CloseOutcome) -> None:
    for bot in bots:
        bot.learn([turn.moves[bot.name].die for turn in outcome.result.turns])


def _progress(outcome: CloseOutcome, last: int, out: TextIO) -> None:
    result = outcome.result
    traps = ", ".join(map(str, result.trapdoors)) or "none"
    print(
        f"Round {outcome.round} closed ({counted(result.turns_ordered, 'turn')}; "
        f"trapdoors: {traps})",
        file=out,
    )
    width = max(len(n) for n in result.positions)
    for name, position in ranked(result.positions):
        filled = min(30, round(30 * position / last))
        note = f"  referee moved: {result.nmr[name]}" if name in result.nmr else ""
        print(
            f"  {name:<{width}} {position:>3} |{'#' * filled}{'.' * (30 - filled)}|{note}", file=out
        )
    out.flush()


def _progress_classic(outcome: CloseOutcome, last: int, out: TextIO) -> None:
    """A classic round: every throw, then the positions (nothing is secret)."""
    rnd = outcome.result  # ClassicRound
    print(f"Round {outcome.round} closed: {counted(len(rnd.throws), 'throw')}", file=out)
    for throw in rnd.throws:
        print(f"  {throw_line(throw)}", file=out)
    positions = dict(outcome.adjudication.positions)
    width = max(len(n) for n in positions)
    for name, position in ranked(positions):
        filled = min(30, round(30 * position / last))
        print(f"  {name:<{width}} {position:>3} |{'#' * filled}{'.' * (30 - filled)}|", file=out)
    out.flush()


def _wait_for_mail(count: Callable[[], int], expected: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and count() < expected:
        time.sleep(0.2)
