"""scripts/install, as the GM's guide runs it, and the installed command as the service's
user runs it (issue 12: ``sudo ./scripts/demo`` built an environment on root's own Python,
which the service's user could not execute)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from serviceuser import lay_out, owner, place, service_unit, service_user

ROOT = Path(__file__).parents[1]
HOMES = ("/root/", "/home/", "/run/user/")

__all__ = ["place", "service_user"]  # fixtures, used by name


def as_user(user: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", user, "--", *argv],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def as_root(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), cwd="/", capture_output=True, text=True, timeout=120, check=False
    )


def system_python() -> str | None:
    """The newest /usr/bin/python3.X that is 3.11 or newer, as scripts/install picks it."""
    found = []
    for path in Path("/usr/bin").glob("python3.*"):
        minor = path.name.removeprefix("python3.")
        if minor.isdigit() and int(minor) >= 11 and os.access(path, os.X_OK):
            found.append((int(minor), str(path)))
    return max(found)[1] if found else None


def install(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHON")}
    return subprocess.run(
        [str(ROOT / "scripts" / "install"), *argv],
        cwd="/",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_install_refuses_a_python_the_service_cannot_run(tmp_path: Path) -> None:
    """A Python that is too old, or one under a home folder, is refused before anything is
    made, with what to do instead."""
    old = tmp_path / "python3"
    old.write_text("#!/bin/sh\necho 3.9.2\nexit 1\n")
    old.chmod(0o755)
    prefix = "/tmp/snl-pbem-never-made"
    done = install("--python", str(old), "--prefix", prefix, "--no-bindir")
    assert done.returncode == 1
    if any(str(tmp_path).startswith(home) for home in HOMES):
        assert "is under a home folder" in done.stderr, done.stderr
    else:
        assert f"--python {old} is Python 3.9.2; snl-pbem needs 3.11 or newer" in done.stderr
    assert not Path(prefix).exists()

    done = install("--prefix", "/root/snl-pbem", "--no-bindir")
    assert done.returncode == 1
    if system_python() is not None:
        assert "--prefix /root/snl-pbem is under a home folder" in done.stderr, done.stderr
    else:
        assert "needs the system's Python 3.11 or newer" in done.stderr, done.stderr

    real = os.path.realpath(sys.executable)
    if any(real.startswith(home) for home in HOMES):  # this test run's own (a pyenv, say)
        done = install("--python", sys.executable, "--prefix", prefix, "--no-bindir")
        assert done.returncode == 1
        assert "is under a home folder" in done.stderr and "the system's Python" in done.stderr


def test_install_will_not_overwrite_an_old_checkout(tmp_path: Path) -> None:
    """The old guide cloned the project into /opt/snl-pbem itself."""
    if system_python() is None:
        pytest.skip("no system Python 3.11+ under /usr/bin")
    old = Path(tempfile.mkdtemp(prefix="snl-old-checkout-", dir="/tmp"))
    try:
        (old / "pyproject.toml").write_text("[project]\n")
        done = install("--prefix", str(old), "--no-bindir")
        assert done.returncode == 1
        assert "already holds something that is not an snl-pbem install" in done.stderr
        assert (old / "pyproject.toml").read_text() == "[project]\n"
    finally:
        shutil.rmtree(old)


@pytest.mark.slow
def test_installed_command_runs_as_the_service_user(place: Path, service_user: str) -> None:
    if os.environ.get("SNL_PBEM_INNER_RUN") == "1":
        pytest.skip("the outer test run installs already (inside the fresh-clone run)")
    if shutil.which("runuser") is None:
        pytest.skip("runuser is not installed")
    if system_python() is None:
        pytest.skip("no system Python 3.11+ under /usr/bin (scripts/install refuses, rightly)")
    prefix, bindir = place / "opt" / "snl-pbem", place / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHON")}
    # root's umask at its strictest: what is installed must still be readable by others
    done = subprocess.run(
        [
            "bash",
            "-c",
            'umask 077 && exec "$0" "$@"',
            str(ROOT / "scripts" / "install"),
            "--prefix",
            str(prefix),
            "--bindir",
            str(bindir),
        ],
        cwd="/",
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "Installed snl-pbem" in done.stdout

    # the system's Python, nothing of root's or of a home folder
    venv = (prefix / "pyvenv.cfg").read_text()
    assert "home = /usr/bin" in venv, venv
    python = os.path.realpath(prefix / "bin" / "python")
    assert python.startswith("/usr/bin/python3."), python
    command = bindir / "snl-pbem"
    assert os.path.realpath(command) == str(prefix / "bin" / "snl-pbem")
    shebang = (prefix / "bin" / "snl-pbem").read_text().splitlines()[0]
    assert shebang == f"#!{prefix}/bin/python", shebang
    assert (prefix / "share" / "snl-pbem" / "snl-pbem.service").is_file()
    assert (prefix / "share" / "snl-pbem" / "sysusers.d" / "snl-pbem.conf").is_file()
    for guide in ("players.md", "players.zh-Hans.md", "players.th.md"):  # for the GM to read
        assert (prefix / "share" / "snl-pbem" / guide).is_file(), guide
    # and in the package, for the site to publish (issue 25)
    pages = subprocess.run(
        [
            str(prefix / "bin" / "python"),
            "-c",
            "from snl_pbem.site.guides import guide_pages\nprint(sorted(guide_pages()))",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",  # (the installed package, not this checkout's)
    )
    assert pages.stdout.split() == [
        "['guide/players.html',",
        "'guide/players.th.html',",
        "'guide/players.zh-Hans.html']",
    ], pages.stderr

    # an unprivileged user runs it
    helped = as_user(service_user, str(command), "--help")
    assert helped.returncode == 0, helped.stderr
    assert "check-config" in helped.stdout

    # the GM's layout (deploy/README.md): the config root:USER 0640, passwords root's alone
    config, state = lay_out(place, service_user)
    gid = pwd.getpwnam(service_user).pw_gid
    os.chown(config.parent / "smtp.secret", 0, gid)
    (config.parent / "smtp.secret").chmod(0o640)
    unit = service_unit(place, service_user, config, state, command=str(command))

    # as root, check-config checks as the service's user, the installed command included
    checked = as_root(str(command), "check-config", "--config", str(config), "--unit", str(unit))
    assert checked.returncode == 2, checked.stdout
    assert f"mail.imap.password_file: the service's user {service_user} cannot read" in (
        checked.stderr
    )
    assert "the unit's command" not in checked.stderr  # the installed command runs
    os.chown(config.parent / "imap.secret", 0, gid)
    (config.parent / "imap.secret").chmod(0o640)
    checked = as_root(str(command), "check-config", "--config", str(config), "--unit", str(unit))
    assert checked.returncode == 0, checked.stderr
    assert f"as the service's user {service_user}" in checked.stdout
    checked = as_user(service_user, str(command), "check-config", "--config", str(config))
    assert checked.returncode == 0, checked.stderr
    assert ": OK" in checked.stdout

    # the referee's commands as the service's user; status needs no password
    assert (
        as_user(service_user, str(command), "db", "upgrade", "--config", str(config)).returncode
        == 0
    )
    started = as_user(service_user, str(command), "start", "g1", "--config", str(config))
    assert started.returncode == 0, started.stderr
    (config.parent / "imap.secret").chmod(0o600)
    (config.parent / "smtp.secret").unlink()
    status = as_user(service_user, str(command), "status", "--config", str(config))
    assert status.returncode == 0, status.stderr
    assert "g1:" in status.stdout and "round 1" in status.stdout

    # close-round run by root leaves a backup of the service's
    closed = as_root(str(command), "close-round", "g1", "--config", str(config))
    assert closed.returncode == 0, closed.stderr
    [backup] = list((state / "backups").iterdir())
    assert owner(backup) == (service_user, service_user, 0o640)
    assert owner(state / "backups") == (service_user, service_user, 0o750)
    status = as_user(service_user, str(command), "status", "g1", "--config", str(config))
    assert status.returncode == 0 and "round 2" in status.stdout, status.stderr
