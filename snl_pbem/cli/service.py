"""What the systemd service will be able to read, write and run (``check-config --as-service``).

The service (deploy/snl-pbem.service) runs as its own user, ``snl-pbem`` (made by
deploy/sysusers.d/snl-pbem.conf), sees ``/home``, ``/root`` and ``/run/user`` not at all
(``ProtectHome=yes``), may write only its state directory (``ProtectSystem=strict``), and gets
its passwords as systemd credentials (``LoadCredential=``), which systemd reads as root and
hands to the service in ``$CREDENTIALS_DIRECTORY``. A check run as root says nothing about
any of that, so this module reads the installed unit and checks each file as the service's
user would meet it: it forks, becomes that user, and tries.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shlex
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sqlalchemy.engine import make_url

from snl_pbem.boards import UnknownBoard, locate
from snl_pbem.config import (
    DEFAULT_CONFIG,
    ENV_CONFIG,
    ENV_CREDENTIALS,
    Config,
    password_file_problem,
    without_password,
)
from snl_pbem.errors import ConfigError
from snl_pbem.rules.words import agree, counted

UNIT_NAME = "snl-pbem.service"
UNIT_DIRS = (
    Path("/etc/systemd/system"),
    Path("/usr/lib/systemd/system"),
    Path("/lib/systemd/system"),
)
SERVICE_USER = "snl-pbem"
CREDENTIAL_STORES = (Path("/etc/credstore"), Path("/run/credstore"), Path("/usr/lib/credstore"))
HIDDEN_BY_PROTECT_HOME = (Path("/home"), Path("/root"), Path("/run/user"))
GUIDE = "deploy/README.md"

Access = Literal["read", "list", "write-dir", "read-write", "run"]


@dataclass(frozen=True)
class Unit:
    """The settings of the installed unit that decide what the service can reach."""

    path: Path | None
    user: str = SERVICE_USER
    dynamic_user: bool = False
    config: Path = DEFAULT_CONFIG
    credentials: dict[str, str] = field(default_factory=dict)
    """Credential id -> where systemd reads it (LoadCredential=ID:PATH)."""
    state_dirs: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    protect_system_strict: bool = False
    protect_home: bool = False
    commands: tuple[Path, ...] = ()

    def credential_source(self, credential: str) -> Path | None:
        """The file systemd reads credential ``credential`` from, if any exists."""
        source = self.credentials.get(credential)
        if source is None:
            return None
        if source.startswith("/"):
            return Path(source) if os.path.lexists(source) else None
        for store in CREDENTIAL_STORES:  # a relative name: systemd's credential stores
            if (store / source).exists():
                return store / source
        return None

    def credential_places(self, credential: str) -> str:
        source = self.credentials.get(credential, "")
        if source.startswith("/"):
            return source
        return " or ".join(str(store / source) for store in CREDENTIAL_STORES)


def find_unit(given: Path | None = None) -> Path | None:
    """``given``, else the installed snl-pbem.service, else None."""
    if given is not None:
        return given
    for folder in UNIT_DIRS:
        if (folder / UNIT_NAME).is_file():
            return folder / UNIT_NAME
    return None


def read_unit(path: Path | None) -> Unit:
    """The unit's [Service] settings (its drop-ins in ``NAME.d/*.conf`` too); the defaults
    of deploy/snl-pbem.service when there is no unit."""
    if path is None:
        return Unit(None)
    settings: dict[str, list[str]] = {}
    dropins = sorted(path.with_name(path.name + ".d").glob("*.conf"))
    for file in (path, *dropins):
        section = ""
        for line in _logical_lines(file.read_text(encoding="utf-8")):
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1]
            elif section == "Service" and "=" in line:
                key, _, value = line.partition("=")
                values = settings.setdefault(key.strip(), [])
                if value.strip():
                    values.append(value.strip())
                else:  # an empty assignment resets a list
                    values.clear()

    def last(key: str, default: str = "") -> str:
        return settings.get(key, [default])[-1] if settings.get(key) else default

    credentials = {}
    for entry in settings.get("LoadCredential", []):
        ident, _, source = entry.partition(":")
        credentials[ident] = source or ident
    config = DEFAULT_CONFIG
    for entry in settings.get("Environment", []):
        for assignment in shlex.split(entry):
            name, _, value = assignment.partition("=")
            if name == ENV_CONFIG and value:
                config = Path(value)
    state = tuple(
        Path("/var/lib") / name
        for entry in settings.get("StateDirectory", [])
        for name in entry.split()
    )
    writable = tuple(
        Path(p.lstrip("-+")) for entry in settings.get("ReadWritePaths", []) for p in entry.split()
    )
    commands = []
    for key in ("ExecStartPre", "ExecStart"):
        for entry in settings.get(key, []):
            words = shlex.split(entry)
            if words:
                commands.append(Path(words[0].lstrip("-+!@:")))
    return Unit(
        path=path,
        user=last("User", SERVICE_USER),
        dynamic_user=_yes(last("DynamicUser", "no")),
        config=config,
        credentials=credentials,
        state_dirs=state,
        writable=writable,
        protect_system_strict=last("ProtectSystem") == "strict",
        protect_home=_yes(last("ProtectHome", "no")) or last("ProtectHome") == "tmpfs",
        commands=tuple(commands),
    )


def _logical_lines(text: str) -> Iterable[str]:
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith(("#", ";"))):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        yield pending + line
        pending = ""
    if pending:
        yield pending


def _yes(value: str) -> bool:
    return value.lower() in ("yes", "true", "on", "1")


# -- what a config needs, and where -----------------------------------------------------


@dataclass(frozen=True)
class Need:
    """One thing the service must be able to do: ``access`` to ``path``, for ``key``."""

    key: str
    path: Path
    access: Access
    secret: bool = False
    file: str | None = None
    """The file whose key it is, when not the config file: a game file of games_dir."""
    makes: Path | None = None
    """The missing folder the service would make in ``path`` (web.dir)."""


def needs(config: Config, unit: Unit) -> tuple[list[Need], list[str]]:
    """What the service needs of the file system for ``config``, and the problems found
    without trying (credentials systemd cannot find, paths the sandbox hides)."""
    base = config.path.parent
    mail = config.settings.mail
    found: list[Need] = [Need("the config file", config.path, "read")]
    problems: list[str] = []
    games_dir = config.settings.games_dir
    if games_dir is not None:  # serve lists it, and reads each game file, at every reload
        found.append(Need("games_dir", base / games_dir, "list"))
        found.extend(
            Need("", file, "read", file=str(games_dir / file.name)) for file in config.game_files
        )
    for index, game in enumerate(config.games):
        board = game.settings.board
        prefix = "" if game.file is not None else f"games[{index}]."
        if isinstance(board, str):
            # a file, or a bundled board's name, by load_config's rule (boards.locate): a
            # bundled board is read from the installed package, as the unit's command is
            try:
                where = locate(board, base)
            except UnknownBoard:
                continue  # load_config has named it already
            if isinstance(where, Path):
                found.append(Need(f"{prefix}board", where, "read", file=game.file))
    for name in ("imap", "smtp"):
        section = getattr(mail, name)
        if section is None or section.password_file is None:
            continue
        file = section.password_file
        credential = _credential(file, unit)
        if credential is not None and (
            os.geteuid() != 0
            or unit.credential_source(credential) is not None
            or unit.credentials[credential].startswith("/")
            or not (base / file).exists()
        ):
            continue  # systemd reads it, as root (password_problems checks it)
        # not a credential, or one systemd skips for want of a file: the service then
        # reads the file beside the config (config.secret_file), as its own user
        key = f"mail.{name}.password_file"
        found.append(Need(key, file if file.is_absolute() else base / file, "read", secret=True))
    if mail.dkim is not None:
        key_file = mail.dkim.private_key_file
        found.append(
            Need(
                "mail.dkim.private_key_file",
                key_file if key_file.is_absolute() else base / key_file,
                "read",
                secret=True,
            )
        )
    url = make_url(config.database_url)
    writes: list[tuple[str, Path | None]] = []  # the folders the service writes in
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        database = Path(url.database)
        if database.parent.exists() or database.parent not in unit.state_dirs:
            found.append(Need("database.url", database.parent, "write-dir"))
        if database.exists():
            found.append(Need("database.url", database, "read-write"))
        backups = config.settings.database.backup_dir
        if config.settings.database.backups > 0:
            folder = backups if backups is not None else database.parent / "backups"
            if folder.exists():
                found.append(Need("database.backup_dir", folder, "write-dir"))
        writes += [("database.url", database.parent), ("database.backup_dir", backups)]
    web = config.settings.web
    if web is not None:  # the game pages: the service makes the folder when it is missing
        if web.dir.exists() or web.dir in unit.state_dirs:
            site, makes = web.dir, None
        else:
            site, makes = web.dir.parent, web.dir
        if site.exists() or site not in unit.state_dirs:
            found.append(Need("web.dir", site, "write-dir", makes=makes))
        writes.append(("web.dir", web.dir))
    if unit.protect_system_strict:
        allowed = unit.state_dirs + unit.writable
        first = (allowed or (Path("/var/lib/snl-pbem"),))[0]
        for label, place in writes:
            if place is None or any(_within(place, root) for root in allowed):
                continue
            shown = ", ".join(map(str, allowed)) or "nothing"
            problem = (
                f"{label}: the service may write only {shown} (ProtectSystem=strict in "
                f"{unit.path}), not {place}: put it there, e.g. "
            )
            if label == "web.dir":
                name = unit.path.name if unit.path is not None else UNIT_NAME
                problem += (
                    f'dir = "{first}/site", or let the service write it: sudo systemctl edit '
                    f"{name}, add ReadWritePaths={place} under [Service], and restart "
                    f'({GUIDE}, "Game pages")'
                )
            else:
                problem += f'url = "sqlite:///{first}/snl.db"'
            problems.append(problem)
    for command in unit.commands:
        found.append(Need(f"the unit's command {command}", command, "run"))
    if unit.protect_home:
        for need in found:
            places = _interpreters(need.path) if need.access == "run" else [need.path]
            real = next(
                (
                    Path(os.path.realpath(place))
                    for place in places
                    if any(
                        _within(Path(os.path.realpath(place)), hidden)
                        for hidden in HIDDEN_BY_PROTECT_HOME
                    )
                ),
                None,
            )
            if real is not None:
                problems.append(
                    f"{need.key}: {need.path} is under {Path('/', *real.parts[1:2])}, "
                    f"which the service cannot see (ProtectHome=yes in {unit.path}): "
                    + (
                        "install the command with scripts/install (it goes to /opt/snl-pbem)"
                        if need.access == "run"
                        else "move it, e.g. to /etc/snl-pbem"
                    )
                )
    return found, problems


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _credential(file: Path, unit: Unit) -> str | None:
    """The credential a password_file names, when the service gets it from systemd: a
    relative name the unit loads (LoadCredential=NAME:...), read outside the service."""
    name = str(file)
    if file.is_absolute() or name not in unit.credentials or os.environ.get(ENV_CREDENTIALS):
        return None
    return name


def password_problems(config: Config, unit: Unit, notes: list[str]) -> list[str]:
    """Each password file, checked where the service will read it: a credential's file as
    systemd reads it (as root, before the service starts; only root can check it), any
    other as this process (``check`` then tries it as the service's user)."""
    problems = []
    for name in ("imap", "smtp"):
        section = getattr(config.settings.mail, name)
        if section is None or section.password_file is None:
            continue
        key = f"{config.path.name}: mail.{name}.password_file"
        credential = _credential(section.password_file, unit)
        if credential is None:
            problem = password_file_problem(section.password_file, config.path.parent, name)
            if problem is not None:
                problems.append(f"{key}: {problem}")
            continue
        if os.geteuid() != 0:
            notes.append(
                f"the credential {credential} (mail.{name}.password_file) was not checked: "
                "systemd reads it as root, and only root can check it"
            )
            continue
        source = unit.credential_source(credential)
        if source is None:
            # systemd skips a missing credential of a relative name (LoadCredential=ID:NAME)
            # and the service reads the file beside the config instead; a missing one of an
            # absolute path stops the service from starting
            absolute = unit.credentials[credential].startswith("/")
            beside = config.path.parent / section.password_file
            if not absolute and beside.exists():
                notes.append(
                    f"mail.{name}.password_file: systemd finds no credential {credential} "
                    f"(at {unit.credential_places(credential)}), so the service reads {beside}"
                )
                continue
            problems.append(
                f"{key}: {credential!r} is the service's credential {credential} "
                f"(LoadCredential= in {unit.path}), but systemd finds no file for it at "
                f"{unit.credential_places(credential)}"
                + ("" if absolute else f", and there is no file {beside} either")
                + f': create it, readable by root only ({GUIDE}, "Secrets")'
                + ("; without it the service does not start" if absolute else "")
                + without_password(name)
            )
            continue
        problem = password_file_problem(source, source.parent)
        if problem is not None:
            problems.append(f"{key}: the credential {credential}: {problem}")
    return problems


# -- trying, as the service's user --------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    reason: str
    blocked_at: str | None  # a folder on the way that the user cannot enter


def try_all(needs_: list[Need]) -> list[Refusal | None]:
    """Try each need as the current user: None where it works."""
    return [_try(need) for need in needs_]


def _try(need: Need) -> Refusal | None:
    path = need.path
    try:
        if need.access == "read":
            with path.open("rb") as stream:
                stream.read(1)
        elif need.access == "read-write":
            with path.open("r+b") as stream:
                stream.read(1)
        elif need.access == "list":
            os.listdir(path)
        elif need.access == "write-dir":
            if not path.is_dir():
                raise FileNotFoundError(2, "No such folder")
            if not os.access(path, os.W_OK | os.X_OK):
                raise PermissionError(13, "Permission denied (cannot create files in it)")
        else:
            for program in _interpreters(path, strict=True):
                if not os.access(program, os.X_OK):
                    raise PermissionError(13, f"Permission denied (cannot run {program})")
    except OSError as exc:
        return Refusal(exc.strerror or str(exc), _blocked_at(path))
    return None


def _interpreters(path: Path, *, strict: bool = False) -> list[Path]:
    """A program and, for a script, its interpreter (``#!``), each as the kernel meets it.
    An unreadable program raises OSError when ``strict``, else is taken as it is."""
    chain = [path]
    try:
        with path.open("rb") as stream:
            first = stream.readline(256)
    except OSError:
        if strict:
            raise
        return chain
    if first.startswith(b"#!"):
        words = first[2:].decode("utf-8", "replace").split()
        if words:
            interpreter = Path(words[0])
            chain.append(interpreter)
            real = Path(os.path.realpath(interpreter))
            if real != interpreter:
                chain.append(real)
    return chain


def _blocked_at(path: Path) -> str | None:
    for folder in reversed(Path(os.path.abspath(path)).parents):
        if folder.exists() and not os.access(folder, os.X_OK):
            return str(folder)
    return None


def try_as(user: str, needs_: list[Need]) -> list[Refusal | None]:
    """Try each need as ``user``: in this process when it is that user, else (as root) in a
    child that has become it. PermissionError when neither is possible."""
    entry = pwd.getpwnam(user)
    if os.geteuid() == entry.pw_uid:
        return try_all(needs_)
    if os.geteuid() != 0:
        raise PermissionError(f"run check-config as root (sudo) or as {user} to check as {user}")
    groups = os.getgrouplist(user, entry.pw_gid)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become the user, try, report, leave at once
        code = 0
        try:
            os.close(read_fd)
            os.setgroups(groups)
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)
            found = [None if r is None else [r.reason, r.blocked_at] for r in try_all(needs_)]
            data = json.dumps(found).encode()
            while data:
                data = data[os.write(write_fd, data) :]
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    chunks = []
    with os.fdopen(read_fd, "rb") as stream:
        chunks.append(stream.read())
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise PermissionError(f"could not check as {user} (the check itself failed)")
    raw = json.loads(b"".join(chunks))
    return [None if item is None else Refusal(item[0], item[1]) for item in raw]


# -- the check ---------------------------------------------------------------------------


def check(config: Config, unit: Unit, user: str) -> tuple[list[str], list[str]]:
    """Problems (each naming the key, the path and the fix) and notes, as ``user``."""
    try:
        pwd.getpwnam(user)
    except KeyError:
        hint = (
            "create it: sudo systemd-sysusers (with deploy/sysusers.d/snl-pbem.conf in "
            f'/etc/sysusers.d/; {GUIDE}, "Install")'
        )
        return [f"the service's user {user} does not exist: {hint}"], []
    notes = []
    if unit.dynamic_user:
        notes.append(
            f"{unit.path} has DynamicUser=yes: the service runs as a new user each time, and "
            f"files cannot be given to it; use the unit in deploy/ (User={SERVICE_USER})"
        )
    found, problems = needs(config, unit)
    problems = [f"{config.path.name}: {p}" for p in problems]
    results = try_as(user, found)
    for need, refusal in zip(found, results, strict=True):
        if refusal is not None:
            where = ": ".join(filter(None, (need.file or config.path.name, need.key)))
            problems.append(f"{where}: " + _explain(need, refusal, user))
    checked = sum(1 for need in found if need.access != "run")
    used = [
        name
        for section in (config.settings.mail.imap, config.settings.mail.smtp)
        if section is not None
        and section.password_file is not None
        and (name := _credential(section.password_file, unit)) is not None
        and (os.geteuid() != 0 or unit.credential_source(name) is not None)
    ]
    notes.append(
        f"as the service's user {user}"
        + (f" (unit {unit.path})" if unit.path else " (no unit installed: its defaults)")
        + f": {counted(checked, 'file or folder', 'files and folders')} checked"
        + (f", {counted(len(unit.commands), 'command')}" if unit.commands else "")
        + (
            f", {agree(len(used), 'credential')} {', '.join(used)} loaded by systemd"
            if used
            else ""
        )
    )
    return problems, notes


def _explain(need: Need, refusal: Refusal, user: str) -> str:
    path = need.path
    group = _group_of(user)
    what = {
        "read": "cannot read",
        "list": "cannot list",
        "read-write": "cannot write",
        "write-dir": "cannot create files in",
        "run": "cannot run",
    }[need.access]
    text = f"the service's user {user} {what} {path} ({refusal.reason}"
    if refusal.blocked_at is not None:
        folder = Path(refusal.blocked_at)
        text += f"; the folder {folder} ({_owner_mode(folder)}) keeps it out): "
        if any(_within(folder, hidden) for hidden in HIDDEN_BY_PROTECT_HOME):
            return (
                text
                + "move it out of the home folder"
                + (" (install with scripts/install)" if need.access == "run" else "")
            )
        return text + f"sudo chgrp {group} {folder} && sudo chmod g+rx {folder}"
    text += f"; {_owner_mode(path)}): " if path.exists() else "): "
    if need.access == "run":
        return text + "install snl-pbem with scripts/install (the system's Python, in /opt)"
    if need.key == "web.dir":  # the owner only: the group is the web server's
        fix = (
            f"sudo chown {user} {path}"
            if need.makes is None
            else f"make {need.makes}: sudo install -d -o {user} -g www-data -m 2750 {need.makes}"
        )
        return text + f'{fix} ({GUIDE}, "Game pages")'
    if need.access in ("write-dir", "read-write"):
        return text + f"sudo chown {user}:{group} {path}"
    if need.access == "list":
        return text + f"sudo chgrp {group} {path} && sudo chmod g+rx {path}"
    fix = f"sudo chgrp {group} {path} && sudo chmod 0640 {path}"
    if need.secret and need.key.endswith("password_file"):
        fix += f', or make it a systemd credential ({GUIDE}, "Secrets")'
    return text + fix


def _group_of(user: str) -> str:
    try:
        return grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name
    except KeyError:
        return user


def _owner_mode(path: Path) -> str:
    try:
        info = path.stat()
    except OSError:
        return "cannot be looked at"
    try:
        owner = pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        owner = str(info.st_uid)
    try:
        group = grp.getgrgid(info.st_gid).gr_name
    except KeyError:
        group = str(info.st_gid)
    return f"{owner}:{group}, mode {stat.S_IMODE(info.st_mode):04o}"


def is_service_config(config: Config, unit: Unit) -> bool:
    """Whether ``config`` is the file the service reads."""
    return os.path.realpath(config.path) == os.path.realpath(unit.config)


def user_exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True


def service_check(
    config: Config, *, forced: bool, user: str | None = None, unit_file: Path | None = None
) -> list[str]:
    """check-config's part about the service: every password where the service will read it,
    and, with ``forced`` (``--as-service``) or when root (or the service's user) checks the
    service's own config, everything else the service needs, tried as its user. Raises
    ConfigError listing the problems; returns notes to show."""
    unit = read_unit(find_unit(unit_file))
    name = user or unit.user
    notes: list[str] = []
    problems = password_problems(config, unit, notes)
    run = forced
    if not forced and is_service_config(config, unit):
        if os.geteuid() == 0 and not user_exists(name):
            notes.append(
                f"not checked as the service's user: {name} does not exist yet "
                f'({GUIDE}, "Install")'
            )
        elif os.geteuid() == 0 or (user_exists(name) and os.geteuid() == pwd.getpwnam(name).pw_uid):
            run = True
    if run:
        try:
            more, more_notes = check(config, unit, name)
        except PermissionError as exc:
            more, more_notes = [f"{config.path.name}: {exc}"], []
        problems += more
        notes += more_notes
    if problems:
        raise ConfigError(problems)
    return notes
