"""`serve` as a GM runs it, `demo` as a newcomer runs it, and the deployment files."""

from __future__ import annotations

import email
import email.policy
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from imapclient import IMAPClient
from mailhelpers import key_in, server_mail_config
from sqlalchemy import select

ROOT = Path(__file__).parents[2]
SNL = str(Path(sys.executable).with_name("snl-pbem"))


# Waits end on an event; their limits are hang detectors, far above what the event takes on a
# busy machine: a command or the server's start-up takes about 1 s on an idle 2-core machine
# and 3 to 6 s beside a CPU hog and other test runs, so WAIT (300 s) is 50x that.
WAIT = 300.0


def wait_for(condition, seconds: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
    raise AssertionError(f"timed out waiting for {what}\n{tail}")


GAME = """
[[games]]
id = "{id}"
board = {{ ladders = {{ "4" = 14 }} }}
first_deadline = "{first}"
round_length = "1h"
players = [
  {{ name = "ann", email = "ann@example.org", key = "ann-key-123" }},
  {{ name = "bob", email = "bob@example.org", key = "bob-key-123" }},
]
"""


def write_config(folder: Path, dovecot, user: str, sink, first: datetime, games=("live",)) -> Path:
    text = f"""
timezone = "UTC"
[database]
url = "sqlite:///{folder / "snl.db"}"
{server_mail_config(dovecot, user, sink, 20)}"""
    for game in games:
        text += GAME.format(id=game, first=first.isoformat(timespec="seconds"))
    path = folder / "config.toml"
    path.write_text(text)
    return path


def run(*args: str, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SNL, *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )


def test_serve_refuses_a_bad_config_and_an_old_schema(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[mail]\naddress = "nope"\n')
    done = run("serve", config=bad)
    assert done.returncode == 2 and "mail.address: 'nope' is not an email address" in done.stderr
    good = tmp_path / "good.toml"
    good.write_text(
        f'[database]\nurl = "sqlite:///{tmp_path}/x.db"\n[mail]\n'
        'address = "snl@example.org"\nreferee = "ref@example.org"\n'
    )
    done = run("serve", config=good)
    assert done.returncode == 2 and "run 'snl-pbem db upgrade' first" in done.stderr


@pytest.mark.slow
def test_serve_end_to_end_with_reload_and_stop(tmp_path: Path, dovecot, smtp_sink) -> None:
    user = dovecot.new_user()
    config = write_config(tmp_path, dovecot, user, smtp_sink, datetime.now(UTC))
    began = time.monotonic()
    assert run("db", "upgrade", config=config).returncode == 0
    # round 1's deadline: 12 s after the server is up, taking `start` and the server's
    # start-up to be as slow as `db upgrade` was, three times over (a busy machine moves the
    # deadline later; it must not pass before the orders are in, or catch-up closes it)
    took = time.monotonic() - began
    first = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=12 + 3 * took)
    config = write_config(tmp_path, dovecot, user, smtp_sink, first)
    assert run("start", "live", config=config).returncode == 0
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115 (closed in finally)
    server = subprocess.Popen(
        [SNL, "serve", "--config", str(config), "--log-level", "info"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        welcomes = lambda: sum(b"Welcome" in d.raw for d in smtp_sink.delivered)  # noqa: E731
        wait_for(lambda: welcomes() == 2, WAIT, "the welcome mails", tmp_path / "serve.log")
        client = IMAPClient(dovecot.host, port=dovecot.port, ssl=False, timeout=10)
        client.login(user, "secret")
        for name, die in (("ann", 4), ("bob", 2)):
            client.append(
                "INBOX",
                (
                    f"From: {name}@example.org\r\nSubject: [live]\r\n"
                    f"Message-ID: <{name}-serve@x.org>\r\n\r\n"
                    f"KEY {name}-key-123\r\nDICE {die}\r\n"
                ).encode(),
            )
        client.logout()
        acks = lambda: sum(b"[live] Orders received" in d.raw for d in smtp_sink.delivered)  # noqa: E731
        wait_for(lambda: acks() == 2, WAIT, "the acknowledgements", tmp_path / "serve.log")
        reports = lambda: [d for d in smtp_sink.delivered if b"Round 1 report" in d.raw]  # noqa: E731
        wait_for(
            lambda: len(reports()) == 2,
            WAIT,
            "the round reports at the deadline",
            tmp_path / "serve.log",
        )
        assert b"ann    14" in reports()[0].raw or b"ann   14" in reports()[0].raw
        # SIGHUP: a new game in the config appears without a restart
        write_config(
            tmp_path, dovecot, user, smtp_sink, first + timedelta(days=1), games=("live", "later")
        )
        server.send_signal(signal.SIGHUP)
        wait_for(
            lambda: "later" in run("status", "--json", config=config).stdout,
            WAIT,
            "the reloaded game",
        )
        sent = lambda: {status for status, _ in _outbox(tmp_path / "snl.db")} == {"sent"}  # noqa: E731
        wait_for(sent, WAIT, "the outbox to drain", tmp_path / "serve.log")
        started = time.monotonic()
        server.send_signal(signal.SIGTERM)
        # prompt: it does not wait out a thread's 20 s join timeout or an IDLE renewal (a stop
        # takes under 1 s on an idle machine, 2 s beside a CPU hog and two other test runs)
        assert server.wait(WAIT) == 0 and time.monotonic() - started < 15
    finally:
        if server.poll() is None:
            server.kill()
        log.close()
    text = (tmp_path / "serve.log").read_text()
    assert "live: round 1 closed" in text and "config: later: new game" in text
    assert "ann-key-123" not in text  # no secret in the log
    # a restart finds everything done: nothing is applied, queued or sent twice (its first
    # poll and catch-up are over when it says "serving"; the sender's pass follows at once)
    before = len(smtp_sink.delivered)
    queued = _outbox(tmp_path / "snl.db")
    restart_log = tmp_path / "restart.log"
    with restart_log.open("wb") as log:
        server = subprocess.Popen(
            [SNL, "serve", "--config", str(config), "--log-level", "info"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: "serving" in restart_log.read_text(), WAIT, "the restart", restart_log)
        time.sleep(2)
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(WAIT) == 0
    assert _outbox(tmp_path / "snl.db") == queued
    assert len(smtp_sink.delivered) == before


def _outbox(db_path: Path) -> list[tuple[str, int]]:
    """Each kind of message in the outbox, with its status and count."""
    import sqlite3

    with sqlite3.connect(db_path, timeout=60) as conn:
        return conn.execute(
            "select status, count(*) from outbox group by status, kind order by status, kind"
        ).fetchall()


@pytest.mark.slow
def test_referee_commands_while_the_server_runs(tmp_path: Path, dovecot, smtp_sink) -> None:
    """`start` and `extend` from the command line while `serve` runs (the GM guide's order):
    the started game's deadline is picked up and closes the round; the extended deadline is
    kept (whether the rescan or the old deadline's job sees the change first; the second way
    is tested step by step in tests/runners/test_scheduler.py)."""
    user = dovecot.new_user()
    config = write_config(tmp_path, dovecot, user, smtp_sink, datetime.now(UTC), games=())
    began = time.monotonic()
    assert run("db", "upgrade", config=config).returncode == 0
    step = time.monotonic() - began  # one command on this machine, now
    # ext's first deadline must pass while the server runs and after `extend`, new's after
    # `start new`: 12 s and 20 s on an idle machine, plus six commands' time (four come
    # first: start, the server's start-up, start, extend), which a busy machine makes longer
    now = datetime.now(UTC).replace(microsecond=0)
    ext_first = now + timedelta(seconds=12 + 6 * step)
    new_first = ext_first + timedelta(seconds=8)
    text = config.read_text()
    text += GAME.format(id="new", first=new_first.isoformat())
    text += GAME.format(id="ext", first=ext_first.isoformat())
    config.write_text(text)
    assert run("start", "ext", config=config).returncode == 0
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [SNL, "serve", "--config", str(config), "--log-level", "info"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: "serving 2 games from" in log_path.read_text(), WAIT, "serve", log_path)
        done = run("start", "new", config=config)
        assert done.returncode == 0, done.stderr
        done = run("extend", "ext", "--by", "1h", config=config)
        assert done.returncode == 0, done.stderr
        late = datetime.now(UTC) - ext_first
        assert late < timedelta(0), f"the commands took {late} longer than allowed for"

        def state(game: str) -> str:
            shown = run("status", game, "--json", config=config)
            return json.loads(shown.stdout)[0]["rounds_played"]

        wait_for(lambda: state("new") == 1, WAIT, "the started game's first close", log_path)
        assert state("ext") == 0  # its old deadline (and grace) passed long ago
        assert "ext: round 1 closed" not in log_path.read_text()
        server.send_signal(signal.SIGTERM)
        assert server.wait(WAIT) == 0
    finally:
        if server.poll() is None:
            server.kill()


def _demo_signed_up_by_mail(folder: Path, text: str, round_length: int) -> None:
    """The demo's game took its players by mail (3 bots; dee joins once it is full):
    LIST, JOIN, a code each by mail, CONFIRM from the same address, the third seat starts
    the game, each key comes in the welcome, round 1's deadline one round after the
    start; dee asks for a taken name (told so), then joins: standby."""
    from snl_pbem.store import Database, Game, InboundMessage, Player, Round, Signup

    config = (folder / "config.toml").read_text()
    assert 'signup = "open"' in config and "players = [" not in config
    assert "ann sends LIST" in text and "Forming: 0 players of 3" in text
    assert "seat 3/3 - game full: started" in text
    assert "dee sends JOIN demo bob: \"The name 'bob' is taken in demo: choose another.\"" in text
    assert "dee is on the standby list" in text
    assert text.index("standby list") < text.index("Round 1 closed")
    mail = folder / "mail"

    def bodies(who: str, subject: str) -> list[str]:
        found = []
        for path in sorted((mail / who).glob("*.eml")):
            message = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
            if subject in str(message["Subject"]):
                found.append(message.get_body(("plain",)).get_content().replace("\r\n", "\n"))
        return found

    db = Database(f"sqlite:///{folder / 'demo.db'}")
    try:
        with db.transaction() as s:
            inbound = [row.error or "" for row in s.scalars(select(InboundMessage))]
            signups = {row.name: row.state for row in s.scalars(select(Signup))}
            players = {row.name: row.order_key_source for row in s.scalars(select(Player))}
            game = s.scalars(select(Game)).one()
            first = s.scalars(select(Round).where(Round.number == 1)).one()
            started, deadline = game.started_at, first.deadline
    finally:
        db.dispose()
    for who in ("ann", "bob", "cy"):
        [code] = bodies(who, "Your confirmation code")
        assert f'asked to join Demo game as\n"{who}"' in code
        assert "You have a seat" in bodies(who, "You have a seat")[0]
        [welcome] = bodies(who, "your order key")
        assert key_in(welcome), who
    assert "has started" in bodies("cy", "You have a seat")[0]  # the last seat
    assert bodies("dee", "About your request") and bodies("dee", "Your confirmation code")
    assert bodies("dee", "You are on the standby list") and not bodies("dee", "order key")
    assert signups == {"ann": "seated", "bob": "seated", "cy": "seated", "dee": "standby"}
    assert players == dict.fromkeys(("ann", "bob", "cy"), "generated")  # keys by mail only
    assert "joined demo as cy: seated; the game started" in inbound
    assert "joined demo as dee: standby" in inbound
    assert sum(d == "join: code sent" for d in inbound) == 4 and "list sent" in inbound
    # round 1 has (nearly: the schedule's shift is whole seconds) a round after the start
    assert round_length - 1 < (deadline - started).total_seconds() <= round_length
    # ann and cy chose Thai and Chinese by mail once seated: their last mail (the game's
    # end) is in it; bob's stays English
    assert "ann sends LANGUAGE th and cy LANGUAGE zh" in text
    for who, code in (("ann", "th"), ("bob", "en"), ("cy", "zh-Hans")):
        last = max((mail / who).glob("*.eml"), key=lambda path: path.stat().st_mtime_ns)
        message = email.message_from_bytes(last.read_bytes(), policy=email.policy.default)
        assert message.get_body(("plain",))["Content-Language"] == code, (who, last.name)


def game_over_to(folder: Path) -> set[str]:
    """Who the demo's server sent a game-over mail (each in their language: the file
    names of ann's and cy's are in Thai and Chinese)."""
    from snl_pbem.store import Database, OutboxMessage

    db = Database(f"sqlite:///{folder / 'demo.db'}")
    try:
        with db.transaction() as s:
            rows = s.scalars(
                select(OutboxMessage.recipient).where(
                    OutboxMessage.kind == "game-over", OutboxMessage.status == "sent"
                )
            ).all()
    finally:
        db.dispose()
    return {row.split("@")[0] for row in rows}


@pytest.mark.slow
def test_demo_plays_a_whole_game(tmp_path: Path) -> None:
    """Players sign up by mail, then the game plays to its end through serve."""
    from snl_pbem.cli.demo import ROUND_LENGTH_S, run_demo

    out = tmp_path / "demo.txt"
    with out.open("w") as stream:
        assert run_demo(tmp_path / "demo", players=3, seed=5, out=stream) == 0
    text = out.read_text()
    assert "Round 1 closed" in text and "Game over after" in text
    _demo_signed_up_by_mail(tmp_path / "demo", text, ROUND_LENGTH_S)
    mail = tmp_path / "demo" / "mail"
    for who in ("ann", "bob", "cy", "referee"):
        files = sorted((mail / who).glob("*.eml"))
        assert files, who
    assert {"ann", "bob", "cy"} <= game_over_to(tmp_path / "demo")
    assert any("game-over" in f.name for f in (mail / "bob").glob("*.eml"))  # in English
    assert "no orders received (R17)" in text and "invalid dice (R18)" in text


@pytest.mark.slow
def test_demo_plays_a_whole_classic_game_through_serve(tmp_path: Path) -> None:
    """Issue 14: a whole classic game by email (RULES-CLASSIC.md) through the real server:
    finish = "all", bump and roll-again on; the server throws (C11), one bot sends dice
    and is told why not (C12), one never writes. The players sign up by mail first; the
    seed the demo picks ends the game within CLASSIC_MOST_ROUNDS rounds."""
    from snl_pbem.cli.demo import CLASSIC_MOST_ROUNDS, CLASSIC_ROUND_LENGTH_S, run_demo

    out = tmp_path / "demo.txt"
    with out.open("w") as stream:
        assert run_demo(tmp_path / "demo", players=3, seed=5, out=stream, ruleset="classic") == 0
    text = out.read_text()
    assert "Round 1 closed: " in text and " threw " in text
    assert "the finishing order is" in text
    rounds = int(re.search(r"Game over after (\d+) rounds", text).group(1))
    assert rounds <= CLASSIC_MOST_ROUNDS
    _demo_signed_up_by_mail(tmp_path / "demo", text, CLASSIC_ROUND_LENGTH_S)
    mail = tmp_path / "demo" / "mail"
    assert {"ann", "bob", "cy"} <= game_over_to(tmp_path / "demo")
    refusals = [
        email.message_from_bytes(f.read_bytes()).get_payload(decode=True).decode()
        for f in (mail / "bob").glob("*about-your-message*.eml")
    ]
    assert refusals and all('"DICE 6": in this game the server throws' in r for r in refusals)


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    unit = (ROOT / "deploy" / "snl-pbem.service").read_text()
    assert "DynamicUser=yes" not in unit  # files cannot be given to a dynamic user
    for key in (
        "User=snl-pbem",
        "LoadCredential=imap.password:",
        "UMask=0027",
        "StateDirectory=",
        "ExecStartPre=",
        "ExecReload=",
        "Restart=on-failure",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "RestrictAddressFamilies=",
        "Type=notify",
    ):
        assert key in unit, key
    local = tmp_path / "snl-pbem.service"
    local.write_text(unit.replace("/opt/snl-pbem/bin/snl-pbem", SNL))
    done = subprocess.run(
        ["systemd-analyze", "verify", str(local)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_the_readme_commands_work_in_a_fresh_clone(tmp_path: Path) -> None:
    """The README's set-up from a new clone: `./scripts/demo` (it makes the virtual
    environment), then the test command, which sets up the rest (packages, servers, ruff,
    mypy). Its tests there are those that read what a clone must hold besides the code
    (``FROM_THE_CLONE``: templates in every language, catalogs, migrations, boards, the
    examples, deploy/, the guides, the mail corpus), and every test file is collected, so a
    module or helper left out of git fails here too. Not the quick suite a second time: it
    was most of this test's 19 minutes, and CI runs the whole suite from a clean checkout
    anyway (the inner run would skip this test)."""
    if os.environ.get("SNL_PBEM_INNER_RUN") == "1":
        pytest.skip("already inside the fresh-clone run")
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    readme = (ROOT / "README.md").read_text()
    quick = './scripts/test -m "not slow"'
    assert "./scripts/demo" in readme and "./scripts/test" in readme and quick in readme
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    env = {**os.environ, "SNL_PBEM_INNER_RUN": "1"}
    env.pop("VIRTUAL_ENV", None)

    def in_clone(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            args, cwd=clone, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )

    demo = in_clone(["./scripts/demo", "--players", "2"], 900)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert "Game over after" in demo.stdout
    # a hang detector: 2 min on an idle 2-core machine
    tests = in_clone(["./scripts/test", "-m", "not slow", "-q", "-x", *FROM_THE_CLONE], 1800)
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    assert " passed" in tests.stdout and " failed" not in tests.stdout
    assert "== ruff" in tests.stderr and "== mypy" in tests.stderr  # the whole set-up ran
    # every test file imports in the clone (a helper left out of git fails here)
    pytest_bin = str(clone / ".venv" / "bin" / "pytest")
    collected = in_clone([pytest_bin, "--collect-only", "-q", "-p", "no:cacheprovider"], 600)
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-2000:]
    last = collected.stdout.strip().splitlines()[-1]  # "2381 tests collected in 8.20s"
    assert "tests collected" in last and "error" not in last, last


FROM_THE_CLONE = (
    "tests/i18n",  # the templates in every language, and the catalogs
    "tests/store/test_migrations.py",
    "tests/boards",  # snl_pbem/boards
    "tests/test_config.py",  # deploy/boards
    "tests/test_config_example.py",  # deploy/config.example.toml
    "tests/cli/test_main.py",  # snl_pbem/examples
    "tests/cli/test_service_user.py",  # deploy/sysusers.d, the unit
    "tests/runners/test_serve.py::test_systemd_unit_verifies",  # deploy/snl-pbem.service
    "tests/cli/test_restore_guide.py",  # deploy/README.md (README.md: read above)
    "tests/site/test_guides.py",  # docs/
    "tests/site/test_site_pages.py",  # the web templates
    "tests/app/test_ruleset_seam.py",  # tests/data/rulesets
    "tests/mail/test_corpus.py",  # the mail corpus (tests/data/mail)...
    "tests/mail/test_client_replies.py",  # ... clients/
    "tests/mail/test_reply_languages.py",  # ... replies/
    "tests/mail/test_reply_clients_cjk_th.py",  # ... replies-cjk-th/
    "tests/app/test_bounces.py",  # ... bounces/
)
"""The tests the fresh clone runs: each reads a kind of file a clone must hold besides the
code (scripts/ run as the demo and the test command themselves; scripts/install is the
installer test's, a slow one)."""


POISONS = (
    # a NUL in the Message-ID (PostgreSQL refused the row; the poller died on it for ever)
    b"From: ann@example.org\r\nSubject: [live]\r\nMessage-ID: =?utf-8?q?=00?=\r\n\r\nhello\r\n",
    # HTML-only, unclosed tags (took minutes with the old parser, under a write lock)
    b"From: ann@example.org\r\nSubject: [live]\r\nMessage-ID: <html@x.org>\r\n"
    b"Content-Type: text/html\r\n\r\n" + b"\r\n".join([b"<b>" * 300] * 210) + b"\r\n",
    # a text part in a quadratic codec
    b"From: bob@example.org\r\nSubject: [live]\r\nMessage-ID: <puny@x.org>\r\n"
    b"Content-Type: text/plain; charset=punycode\r\n\r\n" + b"a-\r\n" * 20000,
)


@pytest.mark.slow
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_serve_reads_past_poisonous_mail_on_both_intakes(
    tmp_path: Path, dovecot, smtp_sink, request: pytest.FixtureRequest, database: str
) -> None:
    """Poisonous messages first, through IMAP and LMTP at once; the orders behind them are
    acknowledged and counted, and nothing is left unprocessed."""
    import smtplib
    import socket

    user = dovecot.new_user()
    first = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    config = write_config(tmp_path, dovecot, user, smtp_sink, first)
    if database == "postgresql":
        server_pg = request.getfixturevalue("postgres")
        url = server_pg.url(server_pg.create_database())
        config.write_text(config.read_text().replace(f"sqlite:///{tmp_path / 'snl.db'}", url))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config.write_text(
        config.read_text().replace(
            "[mail.smtp]", f'[mail.lmtp]\nhost = "127.0.0.1"\nport = {port}\n[mail.smtp]'
        )
    )
    assert run("db", "upgrade", config=config).returncode == 0
    assert run("start", "live", config=config).returncode == 0
    log_path = tmp_path / "serve.log"
    log = open(log_path, "w")  # noqa: SIM115 (closed in finally)
    server = subprocess.Popen(
        [SNL, "serve", "--config", str(config), "--log-level", "info"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        listening = lambda: "receiving LMTP" in log_path.read_text()  # noqa: E731
        wait_for(listening, WAIT, "the LMTP receiver", log_path)
        client = IMAPClient(dovecot.host, port=dovecot.port, ssl=False, timeout=10)
        client.login(user, "secret")
        for raw in POISONS:
            client.append("INBOX", raw)
        client.append(
            "INBOX",
            b"From: ann@example.org\r\nSubject: [live]\r\nMessage-ID: <ann-ok@x.org>\r\n\r\n"
            b"KEY ann-key-123\r\nDICE 4\r\n",
        )
        client.logout()
        with smtplib.LMTP("127.0.0.1", port, timeout=60) as lmtp:
            for raw in POISONS:
                lmtp.sendmail("x@example.org", ["snl@example.org"], raw.replace(b">\r", b"-l>\r"))
            refused = lmtp.sendmail(
                "bob@example.org",
                ["snl@example.org"],
                b"From: bob@example.org\r\nSubject: [live]\r\nMessage-ID: <bob-ok@x.org>\r\n\r\n"
                b"KEY bob-key-123\r\nDICE 2\r\n",
            )
        assert refused == {}
        acks = lambda: [d for d in smtp_sink.delivered if b"[live] Orders received" in d.raw]  # noqa: E731
        wait_for(lambda: len(acks()) == 2, WAIT, "both acknowledgements", log_path)
        [game] = json.loads(run("status", "live", "--json", config=config).stdout)
        assert {p["name"]: p["orders"] for p in game["players"]} == {
            "ann": "valid",
            "bob": "valid",
        }
        server.send_signal(signal.SIGTERM)
        assert server.wait(WAIT) == 0
    finally:
        if server.poll() is None:
            server.kill()
        log.close()
    text = log_path.read_text()
    assert "Traceback" not in text and "stopped unexpectedly" not in text, text[-3000:]
