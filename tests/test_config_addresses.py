"""Addresses in the config are ones the server can send to: plain ASCII (it does not use
SMTPUTF8), one @, no spaces or control characters. A bad one is a config error naming its
key, with exit status 2, from check-config, from every other command, and on a reload
(refused as a whole: the running server keeps its old config)."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from snl_pbem.app.games import start_game
from snl_pbem.app.rounds import close_with_backup
from snl_pbem.cli.main import main
from snl_pbem.config import PlayerSettings, load_config
from snl_pbem.errors import ConfigError
from snl_pbem.runners.server import Server
from snl_pbem.store import Database, OutboxMessage, Player
from snl_pbem.store.migrate import upgrade
from snl_pbem.timeutil import utcnow

SNL = str(Path(sys.executable).parent / "snl-pbem")

CONFIG = """
[database]
url = "{url}"
[mail]
address = "snl@example.org"
referee = "ref@example.org"
[[games]]
id = "g1"
board = {{ snakes = {{ "47" = 26 }}, ladders = {{ "4" = 14 }} }}
first_deadline = "2030-01-04T18:00"
round_length = "3d"
players = [
  {{ name = "ann", email = "ann@example.org", key = "ann-key-123" }},
  {{ name = "bob", email = "bob@example.org", key = "bob-key-123" }},
]
"""

FIX = "write the address in ASCII; for an internationalized domain use its xn-- form, e.g. "


def write(tmp_path: Path, url: str | None = None, **replace: str) -> Path:
    text = CONFIG.format(url=url or f"sqlite:///{tmp_path / 'snl.db'}")
    for old, new in replace.items():
        assert f'"{old}"' in text, old
        text = text.replace(f'"{old}"', f'"{new}"')
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def check(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["check-config", "--config", str(path)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("old", "key"),
    [
        ("bob@example.org", "games[0].players[1].email"),
        ("snl@example.org", "mail.address"),
        ("ref@example.org", "mail.referee"),
    ],
)
def test_check_config_refuses_a_non_ascii_address_naming_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, key: str
) -> None:
    code, err = check(write(tmp_path, **{old: "jürgen@example.org"}), capsys)
    assert code == 2
    assert (
        f"config.toml: {key}: 'jürgen@example.org' has non-ASCII characters ('ü') and mail "
        f"is sent without SMTPUTF8: {FIX}'ann@xn--mnchen-3ya.de' for 'ann@münchen.de'"
    ) in err
    assert "Traceback" not in err


def test_an_internationalized_domain_gets_its_xn_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = check(write(tmp_path, **{"bob@example.org": "bob@münchen.de"}), capsys)
    assert code == 2
    assert (
        "games[0].players[1].email: 'bob@münchen.de' has non-ASCII characters ('ü') and mail "
        "is sent without SMTPUTF8: write the address in ASCII; for an internationalized "
        "domain use its xn-- form, here 'bob@xn--mnchen-3ya.de'"
    ) in err
    # the suggestion is itself accepted
    assert check(write(tmp_path, **{"bob@example.org": "bob@xn--mnchen-3ya.de"}), capsys)[0] == 0
    # IDNA 2003 would map 'ß' to 'ss', another domain: no suggestion then, only the example
    code, err = check(write(tmp_path, **{"bob@example.org": "bob@straße.de"}), capsys)
    assert code == 2 and f"{FIX}'ann@xn--mnchen-3ya.de' for 'ann@münchen.de'" in err
    assert "strasse" not in err


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("bob smith@example.org", "'bob smith@example.org' is not an email address: it has a "),
        (" bob@example.org", "' bob@example.org' is not an email address: it has a space"),
        (
            "bob@example.org\r\nBcc: x@evil.org",
            "is not an email address: it has a control character ('\\r')",
        ),
        ("bob\t@example.org", "'bob\\t@example.org' is not an email address: it has a control"),
        ("bob@", "'bob@' is not an email address: no domain after the @"),
        ("bob", "'bob' is not an email address: it has no @"),
        ("@example.org", "'@example.org' is not an email address: nothing before the @"),
        (
            "bob@ann@example.org",
            "'bob@ann@example.org' is not an email address: it has more than one @",
        ),
        ("bob@localhost", "'localhost' is not a full domain name"),
        ("bob@exa_mple.org", "'exa_mple.org' is not a domain name"),
        ("bob@example.org.", "'example.org.' is not a domain name"),
        ("<bob@example.org>", "'<' cannot be used before the @"),
        ("bob..b@example.org", "cannot start or end with a dot, or have two together"),
        (".bob@example.org", "cannot start or end with a dot, or have two together"),
        ("b" * 65 + "@example.org", "the part before the @ is longer than 64 characters"),
        ("", "'' is not an email address: it is empty"),
        ("bob\u00a0@example.org", "has an invisible non-ASCII character ('\\xa0')"),
        ("bob\u200b@example.org", "has an invisible non-ASCII character ('\\u200b')"),
    ],
)
def test_addresses_that_would_break_sending_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], address: str, problem: str
) -> None:
    path = write(tmp_path)
    text = path.read_text().replace('"bob@example.org"', _toml_string(address))
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    [line] = caught.value.problems
    assert line.startswith("config.toml: games[0].players[1].email: "), line
    assert problem in line, line
    code, err = check(path, capsys)
    assert code == 2 and problem in err and "Traceback" not in err


def _toml_string(text: str) -> str:
    return (
        '"'
        + "".join(
            ch if 32 <= ord(ch) < 127 and ch not in '"\\' else f"\\u{ord(ch):04x}" for ch in text
        )
        + '"'
    )


def test_every_bad_address_is_listed_at_once(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        **{
            "snl@example.org": "snl@exämple.org",
            "ann@example.org": "änn@example.org",
            "bob@example.org": "bob",
        },
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    keys = [p.split(": ")[1] for p in caught.value.problems]
    assert keys == ["mail.address", "games[0].players[0].email", "games[0].players[1].email"]


def test_the_email_type_itself_refuses_them() -> None:
    """Whatever builds settings (a reload, the config sync's Config), the type refuses."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="non-ASCII"):
        PlayerSettings(name="j", email="jürgen@example.org")
    with pytest.raises(ValidationError, match="more than one @"):
        PlayerSettings(name="j", email="a@b@example.org")
    assert PlayerSettings(name="j", email="J.Doe+snl@Example.ORG").email == "J.Doe+snl@example.org"


def test_dkim_domain_must_be_ascii(tmp_path: Path) -> None:
    path = write(tmp_path)
    (tmp_path / "dkim.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
    path.write_text(
        path.read_text().replace(
            "[[games]]",
            '[mail.dkim]\nselector = "snl"\nprivate_key_file = "dkim.pem"\n'
            'domain = "münchen.de"\n[[games]]',
        )
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.problems == (
        "config.toml: mail.dkim.domain: 'münchen.de' has non-ASCII characters: write the "
        "domain in ASCII, in its xn-- form, here 'xn--mnchen-3ya.de'",
    )


def test_start_refuses_the_config_instead_of_crashing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: check-config said OK, and start died composing the welcome mail
    (UnicodeEncodeError) after round 1 was half set up."""
    path = write(tmp_path, **{"ann@example.org": "jürgen@example.org"})
    for argv in (["db", "upgrade"], ["start", "g1"], ["status"]):
        code = main([*argv, "--config", str(path)])
        err = capsys.readouterr().err
        assert code == 2, argv
        assert "games[0].players[0].email: 'jürgen@example.org' has non-ASCII" in err
        assert "Traceback" not in err


def test_check_config_exits_2_as_a_command(tmp_path: Path) -> None:
    path = write(tmp_path, **{"bob@example.org": "bob@exämple.org"})
    done = subprocess.run(
        [SNL, "check-config", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=300,  # a hang detector: a command takes 1 s idle, 3 to 6 s on a busy machine
        check=False,
    )
    assert done.returncode == 2, done
    assert "games[0].players[1].email: 'bob@exämple.org' has non-ASCII" in done.stderr
    assert "here 'bob@xn--exmple-cua.org'" in done.stderr


def _emails(db: Database) -> dict[str, str]:
    with db.transaction() as s:
        rows = s.execute(select(Player.name, Player.email)).all()
    return {name: email for name, email in rows}


def test_a_reload_with_a_non_ascii_address_is_refused_and_the_old_config_kept(
    tmp_path: Path, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The running server never gets such an address: a reload (SIGHUP) reads the whole
    config again and refuses it as a whole, before the config sync touches the database;
    rounds still close and their mail is composed. A good address later is applied."""
    path = write(tmp_path, url=db_url)
    migrate = Database(db_url)
    upgrade(migrate)
    migrate.dispose()
    server = Server(path)
    server.start()
    try:
        start_game(server.db, server.config, "g1", utcnow())
        running = server.config
        # before: accepted, the player's address changed in the database, closes failed
        write(tmp_path, url=db_url, **{"ann@example.org": "jürgen@example.org"})
        with caplog.at_level(logging.INFO):
            server.reload()
        assert server.config is running and server.rounds.config is running
        assert _emails(server.db) == {"ann": "ann@example.org", "bob": "bob@example.org"}
        assert "reload refused, keeping the running config" in caplog.text
        assert "games[0].players[0].email: 'jürgen@example.org' has non-ASCII" in caplog.text
        assert "config reloaded" not in caplog.text

        # a round close still works (before: every close failed composing the report)
        now = utcnow()
        outcome = close_with_backup(server.db, "g1", now, backups=0, config=server.config)
        assert outcome is not None and outcome.round == 1

        # the same change written in ASCII is applied
        write(tmp_path, url=db_url, **{"ann@example.org": "jurgen@example.org"})
        server.reload()
        assert server.config is not running
        assert _emails(server.db) == {"ann": "jurgen@example.org", "bob": "bob@example.org"}
        outcome = close_with_backup(
            server.db, "g1", now + timedelta(seconds=1), backups=0, config=server.config
        )
        assert outcome is not None and outcome.round == 2
        with server.db.transaction() as s:
            recipients = set(s.scalars(select(OutboxMessage.recipient)))
        assert "jurgen@example.org" in recipients and all(r.isascii() for r in recipients)
    finally:
        server.shutdown()


def test_sighup_with_a_bad_address_keeps_the_server_running(tmp_path: Path) -> None:
    """The real signal: serve logs the refusal, keeps serving and stops cleanly."""
    path = write(tmp_path)
    assert (
        subprocess.run(
            [SNL, "db", "upgrade", "--config", str(path)],
            capture_output=True,
            timeout=300,
            check=False,
        ).returncode
        == 0
    )
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [SNL, "serve", "--config", str(path)], stdout=log, stderr=subprocess.STDOUT
        )
        try:
            _wait_for(log_path, "serving 1 game from")
            write(tmp_path, **{"bob@example.org": "bøb@example.org"})
            server.send_signal(signal.SIGHUP)
            _wait_for(log_path, "reload refused, keeping the running config")
            assert server.poll() is None
            server.send_signal(signal.SIGTERM)
            assert server.wait(300) == 0
        finally:
            if server.poll() is None:
                server.kill()
    text = log_path.read_text()
    assert "games[0].players[1].email: 'bøb@example.org' has non-ASCII" in text
    assert "config reloaded" not in text and "Traceback" not in text


def _wait_for(log_path: Path, text: str, seconds: float = 300) -> None:
    """Until ``text`` is logged; the limit is a hang detector (start-up: 1 s idle, 6 busy)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if text in log_path.read_text():
            return
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not in the log:\n{log_path.read_text()}")
