"""A real unprivileged user for the tests of issue 12 (the service's own user), the GM's
layout of /etc/snl-pbem and /var/lib/snl-pbem for it, and the unit as installed here."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from snl_pbem.cli.main import main

ROOT = Path(__file__).parents[1]
UNIT = ROOT / "deploy" / "snl-pbem.service"

CONFIG = """
timezone = "UTC"
[database]
url = "sqlite:///{state}/snl.db"
backups = 3
[mail]
address = "snl@example.org"
referee = "ref@example.org"
[mail.imap]
host = "imap.example.org"
username = "snl"
password_file = "{imap}"
[mail.smtp]
host = "smtp.example.org"
username = "snl"
password_file = "{smtp}"
[[games]]
id = "g1"
board = {{ ladders = {{ "4" = 14 }} }}
first_deadline = "{first}"
round_length = "1d"
players = [
  {{ name = "ann", email = "ann@example.org", key = "ann-key-123456" }},
  {{ name = "bob", email = "bob@example.org", key = "bob-key-123456" }},
]
"""


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: the test creates a system user and gives it files")
    if shutil.which("useradd") is None or shutil.which("userdel") is None:
        pytest.skip("useradd/userdel are not installed")
    checkout = Path(__file__).resolve().parents[1]
    for folder in (checkout, *checkout.parents):
        if not folder.stat().st_mode & 0o001:  # other users cannot enter it
            pytest.skip(
                f"the checkout is in {folder}, which other users cannot enter (as in the "
                "fresh-clone test, inside pytest's own folder): the service user could not "
                "run this checkout's command"
            )


@pytest.fixture
def service_user() -> Iterator[str]:
    """A new system user and group of its own, as systemd-sysusers would make snl-pbem."""
    need_root()
    name = f"snlt{uuid.uuid4().hex[:8]}"
    subprocess.run(
        [
            "useradd",
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ],
        check=True,
        capture_output=True,
    )
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)
        subprocess.run(["groupdel", name], check=False, capture_output=True)


@pytest.fixture
def place() -> Iterator[Path]:
    """A folder every user can enter (pytest's own tmp_path is root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="snl-service-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def lay_out(place: Path, user: str, *, imap: str = "imap.secret") -> tuple[Path, Path]:
    """/etc/snl-pbem and /var/lib/snl-pbem as the GM's guide makes them: the config
    root:USER 0640 in a folder root:USER 0750, the passwords root's alone (0600), and the
    state directory USER:USER 0750 (systemd's StateDirectory=)."""
    entry = pwd.getpwnam(user)
    etc, state = place / "etc", place / "state"
    etc.mkdir()
    state.mkdir()
    os.chown(etc, 0, entry.pw_gid)
    etc.chmod(0o750)
    os.chown(state, entry.pw_uid, entry.pw_gid)
    state.chmod(0o750)
    first = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    config = etc / "config.toml"
    config.write_text(
        CONFIG.format(state=state, imap=imap, smtp="smtp.secret", first=first.isoformat())
    )
    os.chown(config, 0, entry.pw_gid)
    config.chmod(0o640)
    for secret in ("imap.secret", "smtp.secret"):
        (etc / secret).write_text("s3cret\n")
        (etc / secret).chmod(0o600)
    return config, state


def service_unit(place: Path, user: str, config: Path, state: Path, **extra: str) -> Path:
    """deploy/snl-pbem.service as it would be installed here: this user, this config, and
    the state directory writable (ReadWritePaths=, as StateDirectory= makes /var/lib/...)."""
    text = UNIT.read_text()
    text = text.replace("User=snl-pbem", f"User={user}").replace("Group=snl-pbem", f"Group={user}")
    text = text.replace("/etc/snl-pbem/config.toml", str(config))
    text = text.replace(
        "StateDirectoryMode=0750", f"StateDirectoryMode=0750\nReadWritePaths={state}"
    )
    text = text.replace("/opt/snl-pbem/bin/snl-pbem", extra.get("command", "/usr/bin/true"))
    for credential, source in extra.items():
        if credential != "command":
            text += f"\n[Service]\nLoadCredential={credential}:{source}\n"
    unit = place / "snl-pbem.service"
    unit.write_text(text)
    return unit


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_as(user: str, argv: list[str], place: Path) -> tuple[int, str, str]:
    """``snl-pbem ARGV`` in a child process that has become ``user``."""
    entry = pwd.getpwnam(user)
    out_path, err_path = place / f"out-{uuid.uuid4().hex}", place / f"err-{uuid.uuid4().hex}"
    with out_path.open("w") as out, err_path.open("w") as err:
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 70
            try:
                sys.stdout, sys.stderr = out, err
                os.setgroups([])
                os.setgid(entry.pw_gid)
                os.setuid(entry.pw_uid)
                os.chdir("/")
                code = main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException as exc:  # reported to the parent through stderr
                print(f"{type(exc).__name__}: {exc}", file=err)
            finally:
                out.flush()
                err.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out_path.read_text(), err_path.read_text()


def owner(path: Path) -> tuple[str, str, int]:
    info = path.stat()
    return (
        pwd.getpwuid(info.st_uid).pw_name,
        grp.getgrgid(info.st_gid).gr_name,
        stat.S_IMODE(info.st_mode),
    )
