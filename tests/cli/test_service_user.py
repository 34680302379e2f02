"""The service's own user (issue 12): secrets it can read, commands run as it, and files a
command run by root leaves in its state directory.

The tests that need a real unprivileged user create one (``useradd --system``, a new name
each run, removed afterwards) and are skipped, saying why, when not run as root. A command
"as the user" runs in a forked child that has become that user (setgid/setuid), after the
same command has run once as root, so that every module it needs is already loaded: the
test suite's own Python may live where that user cannot read (a pyenv under /root).
The installed command, as a GM gets it, is tested as such a user in test_install.py.
"""

from __future__ import annotations

import os
import pwd
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from serviceuser import (  # the fixtures place and service_user, used by name
    CONFIG,
    lay_out,
    owner,
    place,
    run,
    run_as,
    service_unit,
    service_user,
)

from snl_pbem.cli.service import Need, Unit, needs
from snl_pbem.config import load_config
from snl_pbem.errors import ConfigError

__all__ = ["place", "service_user"]


# -- secrets -----------------------------------------------------------------------------


def test_a_relative_password_file_is_a_credential_when_the_service_has_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """password_file = "imap.password": $CREDENTIALS_DIRECTORY/imap.password when systemd
    passed that credential, else the file beside the config."""
    first = datetime(2030, 1, 1, tzinfo=UTC).isoformat()
    path = tmp_path / "config.toml"
    path.write_text(
        CONFIG.format(state=tmp_path, imap="imap.password", smtp="smtp.secret", first=first)
    )
    (tmp_path / "smtp.secret").write_text("beside\n")
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "imap.password").write_text("from-systemd\n")
    (credentials / "smtp.secret").write_text("also-from-systemd\n")

    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    with pytest.raises(ConfigError) as caught:
        load_config(path)  # by hand, there is no imap.password beside the config
    assert any(
        p.startswith("config.toml: mail.imap.password_file: cannot read")
        for p in caught.value.problems
    ), caught.value.problems

    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(credentials))
    config = load_config(path)
    assert config.password(config.settings.mail.imap) == "from-systemd"
    assert config.password(config.settings.mail.smtp) == "also-from-systemd"

    (credentials / "smtp.secret").unlink()  # not a credential: the file beside the config
    assert config.password(config.settings.mail.smtp) == "beside"
    (credentials / "imap.password").unlink()
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert any(
        "mail.imap.password_file: cannot read" in p and "has no credential 'imap.password'" in p
        for p in caught.value.problems
    ), caught.value.problems


def test_check_config_names_a_password_file_the_service_cannot_read(
    place: Path, service_user: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Root can read everything, so check-config as root said OK while the service could
    not read its passwords. Now, run by root on the service's config, it checks as the
    service's user, and names the file and the fix."""
    config, state = lay_out(place, service_user)
    unit = service_unit(place, service_user, config, state)
    argv = ["check-config", "--config", str(config), "--unit", str(unit)]

    code, out, err = run(argv, capsys)
    assert code == 2, out
    secret = config.parent / "imap.secret"
    assert f"mail.imap.password_file: the service's user {service_user} cannot read {secret}" in err
    assert f"root:root, mode 0600): sudo chgrp {service_user} {secret}" in err
    assert "make it a systemd credential" in err
    assert "mail.smtp.password_file" in err  # every problem at once

    for name in ("imap.secret", "smtp.secret"):
        os.chown(config.parent / name, 0, pwd.getpwnam(service_user).pw_gid)
        (config.parent / name).chmod(0o640)
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert f"as the service's user {service_user} (unit {unit})" in out


def test_check_config_checks_a_credential_where_systemd_reads_it(
    place: Path, service_user: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A password the unit loads as a credential is read by systemd as root: its file may
    (and should) be root's alone; a missing one is named, with where systemd looks."""
    config, state = lay_out(place, service_user, imap="imap.password")
    store = place / "credstore"
    store.mkdir(mode=0o700)
    source = store / "snl-pbem.imap.password"
    os.chown(config.parent / "smtp.secret", 0, pwd.getpwnam(service_user).pw_gid)
    (config.parent / "smtp.secret").chmod(0o640)
    unit = service_unit(place, service_user, config, state, **{"imap.password": str(source)})
    argv = ["check-config", "--config", str(config), "--unit", str(unit), "--as-service"]

    code, _, err = run(argv, capsys)
    assert code == 2
    assert (
        "mail.imap.password_file: 'imap.password' is the service's credential imap.password" in err
    )
    assert f"systemd finds no file for it at {source}" in err

    source.write_text("s3cret\n")
    source.chmod(0o600)
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert "credential imap.password loaded by systemd" in out


def test_check_config_says_the_service_cannot_run_a_command_under_root(
    place: Path, service_user: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's first trap: a command whose Python is root's (a pyenv under /root)."""
    real = Path(os.path.realpath(sys.executable))
    if not any(str(real).startswith(home) for home in ("/root/", "/home/")):
        pytest.skip(f"this test run's Python ({real}) is not under a home folder")
    config, state = lay_out(place, service_user)
    for name in ("imap.secret", "smtp.secret"):
        (config.parent / name).chmod(0o644)
    command = Path(sys.executable).with_name("snl-pbem")
    unit = service_unit(place, service_user, config, state, command=str(command))
    code, _, err = run(["check-config", "--config", str(config), "--unit", str(unit)], capsys)
    assert code == 2
    assert f"the unit's command {command}" in err
    assert "which the service cannot see (ProtectHome=yes" in err
    assert f"the service's user {service_user} cannot run {command}" in err
    assert "scripts/install" in err


# -- the referee's commands as the service's user ------------------------------------------


def test_status_needs_no_mail_password(
    place: Path, service_user: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Read-only commands read no mail secret: status works as the service's user, who
    cannot read the (root-only) password files, and with no password file at all."""
    config, _ = lay_out(place, service_user)
    assert run(["db", "upgrade", "--config", str(config)], capsys)[0] == 0
    assert run(["start", "g1", "--config", str(config)], capsys)[0] == 0

    (config.parent / "smtp.secret").unlink()  # and one missing altogether
    argv = ["status", "g1", "--config", str(config)]
    code, out, err = run(argv, capsys)  # as root first (loads every module it needs)
    assert code == 0, err
    code, out, err = run_as(service_user, argv, place)
    assert code == 0, err
    assert "g1:" in out and "round 1" in out and "ann" in out
    for argv in (["outbox", "list"], ["inbound", "list"], ["db", "current"]):
        argv = [*argv, "--config", str(config)]
        assert run(argv, capsys)[0] == 0  # as root first, as above
        code, _, err = run_as(service_user, argv, place)
        assert code == 0, (argv, err)


def test_close_round_as_root_leaves_the_service_s_files(
    place: Path, service_user: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The database, the backups folder and a backup made by commands run as root belong
    to the service's user, 0640 (folders 0750), like the service's own; the service can
    then use them."""
    config, state = lay_out(place, service_user)
    assert run(["db", "upgrade", "--config", str(config)], capsys)[0] == 0
    assert owner(state / "snl.db") == (service_user, service_user, 0o640)
    assert run(["start", "g1", "--config", str(config)], capsys)[0] == 0
    code, out, err = run(["close-round", "g1", "--config", str(config)], capsys)
    assert code == 0, err
    assert "round 1 closed" in out

    backups = state / "backups"
    assert owner(backups) == (service_user, service_user, 0o750)
    [backup] = list(backups.iterdir())
    assert owner(backup) == (service_user, service_user, 0o640)
    for path in state.rglob("*"):  # nothing of root's (SQLite's -wal/-shm included)
        assert owner(path)[0] == service_user, path
        assert not owner(path)[2] & 0o007, path  # nothing for others

    # the service's user can go on: close the next round (a backup beside root's)
    argv = ["close-round", "g1", "--config", str(config)]
    code, out, err = run_as(service_user, argv, place)
    assert code == 0, err
    assert "round 2 closed" in out
    assert len(list(backups.iterdir())) == 2


# -- what check-config reads as a name, not a path (issue 21) ------------------------------


def _readable(config: Path, user: str, *names: str) -> None:
    """Give the service's group read access to files beside the config (0640)."""
    for name in names:
        os.chown(config.parent / name, 0, pwd.getpwnam(user).pw_gid)
        (config.parent / name).chmod(0o640)


@pytest.mark.parametrize("as_service", [False, True])
def test_a_bundled_board_by_name_is_no_file_to_read(
    place: Path, service_user: str, capsys: pytest.CaptureFixture[str], as_service: bool
) -> None:
    """board = "standard" names a bundled board, as the guide allows: the check as the
    service's user read it as /etc/snl-pbem/standard and failed. A file of that name
    beside the config wins over the bundled board (snl_pbem.boards.locate), and then it
    is a file the service must be able to read."""
    config, state = lay_out(place, service_user)
    _readable(config, service_user, "imap.secret", "smtp.secret")
    text = config.read_text()
    config.write_text(text.replace('board = { ladders = { "4" = 14 } }', 'board = "standard"'))
    unit = service_unit(place, service_user, config, state)
    argv = ["check-config", "--config", str(config), "--unit", str(unit)]
    argv += ["--as-service"] if as_service else []

    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert "board: 10x10, 10 snakes, 9 ladders, last space 100" in out
    assert f"as the service's user {service_user}" in out

    beside = config.parent / "standard"
    beside.write_text('[board]\nrows = 4\ncolumns = 4\nladders = { "2" = 9 }\n')
    beside.chmod(0o600)  # root's alone: the service could not read the board it would use
    code, out, err = run(argv, capsys)
    assert code == 2, out
    assert f"games[0].board: the service's user {service_user} cannot read {beside}" in err
    _readable(config, service_user, "standard")
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert "board: 4x4, 0 snakes, 1 ladder, last space 16" in out


def test_a_credential_systemd_skips_falls_back_to_the_file_beside_the_config(
    place: Path, service_user: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """LoadCredential=smtp.password:snl-pbem.smtp.password with no such file in the
    credential stores: systemd skips it and the service reads smtp.password beside the
    config, which the check then tries as the service's user. With neither, the problem
    names both places, the fix, and the setup that needs no password."""
    config, state = lay_out(place, service_user)
    _readable(config, service_user, "imap.secret")
    config.write_text(config.read_text().replace('"smtp.secret"', '"smtp.password"'))
    name = f"snl-test-{service_user}.smtp.password"  # in no credential store
    unit = service_unit(place, service_user, config, state, **{"smtp.password": name})
    argv = ["check-config", "--config", str(config), "--unit", str(unit)]

    code, out, err = run(argv, capsys)
    assert code == 2, out
    assert (
        "mail.smtp.password_file: 'smtp.password' is the service's credential smtp.password "
        f"(LoadCredential= in {unit}), but systemd finds no file for it at /etc/credstore/{name}"
    ) in err
    assert f"and there is no file {config.parent / 'smtp.password'} either: create it" in err
    assert (
        "or, for a relay that takes mail without a password, remove username and "
        "password_file from [mail.smtp]"
    ) in err
    assert "without it the service does not start" not in err

    beside = config.parent / "smtp.password"
    beside.write_text("s3cret\n")
    beside.chmod(0o600)
    code, out, err = run(argv, capsys)
    assert code == 2, out
    assert f"mail.smtp.password_file: the service's user {service_user} cannot read {beside}" in (
        err
    )
    _readable(config, service_user, "smtp.password")
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert f"systemd finds no credential smtp.password (at /etc/credstore/{name}" in out
    assert f"so the service reads {beside}" in out


# -- the game pages' folder ([web] dir, issue 24) --------------------------------------------


def _with_web(config: Path, folder: Path) -> None:
    config.write_text(config.read_text() + f'\n[web]\ndir = "{folder}"\n')


def test_check_config_lets_the_service_write_the_game_pages_in_its_state_directory(
    place: Path, service_user: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """web.dir under the state directory (the guide's choice): the unit lets the service
    write there. A missing folder is made by the service in its state directory; one the
    service's user cannot write is named, with a fix that keeps the web server's group."""
    config, state = lay_out(place, service_user)
    _readable(config, service_user, "imap.secret", "smtp.secret")
    site = state / "site"
    _with_web(config, site)
    unit = service_unit(place, service_user, config, state)
    argv = ["check-config", "--config", str(config), "--unit", str(unit)]

    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert "web.dir" not in err

    site.mkdir(mode=0o755)  # root's: the service could not write its pages
    code, out, err = run(argv, capsys)
    assert code == 2, out
    assert (
        f"web.dir: the service's user {service_user} cannot create files in {site} "
        "(Permission denied (cannot create files in it); root:root, mode 0755): "
        f'sudo chown {service_user} {site} (deploy/README.md, "Game pages")'
    ) in err
    os.chown(site, pwd.getpwnam(service_user).pw_uid, -1)  # the owner; the group stays
    code, out, err = run(argv, capsys)
    assert code == 0, err


def test_check_config_names_a_web_dir_the_unit_does_not_let_the_service_write(
    place: Path, service_user: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """ProtectSystem=strict: the service writes only its state directory and the unit's
    ReadWritePaths=. A web.dir elsewhere is named with both fixes, even when the folder
    is the service's own; a drop-in with ReadWritePaths= (systemctl edit) clears it."""
    config, state = lay_out(place, service_user)
    _readable(config, service_user, "imap.secret", "smtp.secret")
    www = place / "www"
    www.mkdir(mode=0o755)
    os.chown(www, pwd.getpwnam(service_user).pw_uid, -1)
    _with_web(config, www)
    unit = service_unit(place, service_user, config, state)
    argv = ["check-config", "--config", str(config), "--unit", str(unit)]

    code, out, err = run(argv, capsys)
    assert code == 2, out
    assert (
        f"web.dir: the service may write only /var/lib/snl-pbem, {state} (ProtectSystem=strict "
        f'in {unit}), not {www}: put it there, e.g. dir = "/var/lib/snl-pbem/site", or let '
        f"the service write it: sudo systemctl edit {unit.name}, add ReadWritePaths={www} "
        'under [Service], and restart (deploy/README.md, "Game pages")'
    ) in err
    assert "database.url" not in err

    dropin = unit.with_name(unit.name + ".d")
    dropin.mkdir()
    (dropin / "override.conf").write_text(f"[Service]\nReadWritePaths={www}\n")
    code, out, err = run(argv, capsys)
    assert code == 0, err

    pages = www / "pages"  # missing, in a folder of root's: the service cannot make it
    config.write_text(config.read_text().replace(f'dir = "{www}"', f'dir = "{pages}"'))
    os.chown(www, 0, -1)
    code, out, err = run(argv, capsys)
    assert code == 2, out
    assert (
        f"web.dir: the service's user {service_user} cannot create files in {www} "
        "(Permission denied (cannot create files in it); root:root, mode 0755): "
        f"make {pages}: sudo install -d -o {service_user} -g www-data -m 2750 {pages} "
        '(deploy/README.md, "Game pages")'
    ) in err


def test_the_unit_decides_where_the_game_pages_may_go(tmp_path: Path) -> None:
    """What the check asks of web.dir, without a user (root not needed): write access to
    the folder, or to its parent when the service is to make it; and under
    ProtectSystem=strict, a place under StateDirectory= or ReadWritePaths=."""
    state = tmp_path / "state"
    state.mkdir()
    config = tmp_path / "config.toml"
    first = datetime(2030, 1, 1, tzinfo=UTC).isoformat()
    config.write_text(CONFIG.format(state=state, imap="imap.s", smtp="smtp.s", first=first))
    for name in ("imap.s", "smtp.s"):
        (tmp_path / name).write_text("s3cret\n")
    unit = Unit(tmp_path / "snl-pbem.service", state_dirs=(state,), protect_system_strict=True)

    _with_web(config, state / "site")
    found, problems = needs(load_config(config), unit)
    assert Need("web.dir", state, "write-dir", makes=state / "site") in found
    assert problems == []
    (state / "site").mkdir()
    found, problems = needs(load_config(config), unit)
    assert Need("web.dir", state / "site", "write-dir") in found
    assert problems == []

    www = tmp_path / "www"
    config.write_text(config.read_text().replace(f"{state}/site", str(www)))
    found, problems = needs(load_config(config), unit)
    [problem] = problems
    assert problem.startswith(f"web.dir: the service may write only {state} (ProtectSystem=")
    assert f"ReadWritePaths={www} under [Service]" in problem
    found, problems = needs(load_config(config), Unit(unit.path, state_dirs=(state,)))
    assert problems == []  # no ProtectSystem=strict: anywhere the user may write
    writable = Unit(unit.path, state_dirs=(state,), writable=(www,), protect_system_strict=True)
    assert needs(load_config(config), writable)[1] == []
