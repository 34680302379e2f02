"""A login and its password go together, and check-config says what to do without one
(issue 21, "Relay without a password").

The example's [mail.smtp] logs in (username plus password_file = "smtp.password"); the
guide says a credential that does not exist is skipped by systemd, "an LMTP-only server,
or a relay without a password". So: a username needs a password, a password needs a
username, neither means no SMTP AUTH, and a missing password file is named with both
fixes: create it, or remove what asks for it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from snl_pbem.cli.main import main

DEPLOY = Path(__file__).parents[1] / "deploy"


def example(tmp_path: Path, *, passwords: tuple[str, ...] = ()) -> Path:
    """deploy/config.example.toml in a folder of its own, with its board and the given
    password files beside it (here no systemd credential exists)."""
    (tmp_path / "boards").mkdir(exist_ok=True)
    (tmp_path / "boards" / "standard.toml").write_text(
        (DEPLOY / "boards" / "standard.toml").read_text()
    )
    for name in passwords:
        (tmp_path / name).write_text("pw\n")
    path = tmp_path / "config.toml"
    path.write_text((DEPLOY / "config.example.toml").read_text())
    return path


def section(path: Path, name: str, change: str) -> None:
    """Replace the key lines of ``[name]`` (up to the next blank line) by ``change``."""
    text = path.read_text()
    head, _, rest = text.partition(f"[{name}]")
    _, blank, tail = rest.partition("\n\n")
    comment = rest.splitlines()[0]  # the comment on the table's own line
    path.write_text(f"{head}[{name}]{comment}\n{change}{blank}{tail}")


def check(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    # a unit that loads no credential: each password_file is a file beside the config
    unit = path.parent / "snl-pbem.service"
    unit.write_text("[Service]\nUser=snl-pbem\n")
    code = main(["check-config", "--config", str(path), "--unit", str(unit)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_example_without_its_passwords_names_each_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = check(example(tmp_path), capsys)
    assert code == 2
    assert (
        f"config.toml: mail.smtp.password_file: cannot read {tmp_path / 'smtp.password'}: "
        "No such file or directory; or, for a relay that takes mail without a password, "
        "remove username and password_file from [mail.smtp]"
    ) in err
    assert (
        f"config.toml: mail.imap.password_file: cannot read {tmp_path / 'imap.password'}: "
        "No such file or directory; or, for a server that gets its mail over LMTP only, "
        "remove [mail.imap]"
    ) in err

    code, out, err = check(example(tmp_path, passwords=("imap.password", "smtp.password")), capsys)
    assert code == 0, err
    assert "mail out: smtp smtp.example.org (logging in as snl)" in out


def test_a_relay_without_a_password_as_the_guide_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The guide's recipe: no username and no password_file in [mail.smtp]; then no
    password is needed and none is asked for (no SMTP AUTH)."""
    path = example(tmp_path, passwords=("imap.password",))
    text = path.read_text()
    smtp = text[text.index("[mail.smtp]") :]
    smtp = smtp[: smtp.index("\n\n")]
    relay = re.sub(r"\n(username|password_file) = [^\n]*", "", smtp)
    assert relay.count("\n") == smtp.count("\n") - 2  # the two lines the guide names
    path.write_text(text.replace(smtp, relay))
    code, out, err = check(path, capsys)
    assert code == 0, err
    assert "mail out: smtp smtp.example.org (no login: a relay without a password)" in out


@pytest.mark.parametrize(
    ("lines", "problem"),
    [
        (
            'host = "smtp.example.org"\nusername = "snl"',
            "config.toml: mail.smtp.password_file: missing: username is set, so the server "
            "logs in to the relay and needs a password; give password_file = "
            '"smtp.password" (the service\'s credential, deploy/README.md, "Secrets") or '
            'password = "..."; or, for a relay that takes mail without a password, remove '
            "username and password_file from [mail.smtp]",
        ),
        (
            'host = "smtp.example.org"\npassword_file = "smtp.password"',
            "config.toml: mail.smtp.username: missing: password_file is set, but the server "
            'logs in to the relay only with a username; add username = "...", or remove '
            "password_file for a relay that takes mail without a password",
        ),
        (
            'host = "smtp.example.org"\npassword = "pw"',
            "config.toml: mail.smtp.username: missing: password is set",
        ),
    ],
)
def test_a_login_needs_both_username_and_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: str, problem: str
) -> None:
    path = example(tmp_path, passwords=("imap.password", "smtp.password"))
    section(path, "mail.smtp", lines)
    code, _, err = check(path, capsys)
    assert code == 2
    assert problem in err


def test_a_mailbox_needs_a_password(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = example(tmp_path, passwords=("smtp.password",))
    section(path, "mail.imap", 'host = "imap.example.org"\nusername = "snl"')
    code, _, err = check(path, capsys)
    assert code == 2
    assert (
        "config.toml: mail.imap.password_file: missing: the mailbox is read by logging in as "
        'username with a password; give password_file = "imap.password"'
    ) in err
    assert "or, for a server that gets its mail over LMTP only, remove [mail.imap]" in err


def test_a_relative_backup_dir_is_beside_the_config(tmp_path: Path) -> None:
    """Every relative path in the config is relative to the config file: backup_dir was
    relative to the process's folder (/ for the service)."""
    from snl_pbem.config import load_config

    path = example(tmp_path, passwords=("imap.password", "smtp.password"))
    path.write_text(path.read_text().replace("backups = 10", 'backups = 10\nbackup_dir = "bk"'))
    assert load_config(path).settings.database.backup_dir == tmp_path.resolve() / "bk"
