"""The referee's and GM's commands: check-config, db upgrade, start, status, close-round,
extend, ingest, inbound, outbox, pause, resume, rollback, notify-restored. Each takes
``--config FILE``.

Every time they print is ``timeutil.show``: a game's in its zone, the rest in the
config's ``timezone``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import timedelta
from email import policy
from email.parser import BytesHeaderParser
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy.engine import make_url

from snl_pbem.app.games import start_game, sync_games
from snl_pbem.app.intake import ingest, retry_set_aside
from snl_pbem.app.referee import extend, pause, render_status, resume, status
from snl_pbem.app.reopened import notify_restored
from snl_pbem.app.retention import is_trimmed_sent
from snl_pbem.app.rounds import close_with_backup, rollback_round
from snl_pbem.app.stored_mail import (
    inbound_message,
    inbound_messages,
    outbox_message,
    outbox_messages,
    retry_mail,
)
from snl_pbem.cli.service import service_check
from snl_pbem.config import Config, LmtpSettings, config_path, load_config
from snl_pbem.errors import CommandError, ConfigError, LifecycleError
from snl_pbem.keys import WEAK_BELOW
from snl_pbem.rules.outcome import ranked
from snl_pbem.rules.words import counted
from snl_pbem.runners.server import serve
from snl_pbem.store import Database, SchemaOutOfDate
from snl_pbem.store.migrate import check_schema, current_revision, head_revision, upgrade
from snl_pbem.store.states import InboundStatus, OutboxStatus
from snl_pbem.timeutil import format_duration, parse_duration, parse_time, show, utcnow, zone

LOCK_WAIT_SECONDS = 30.0
"""How long a command waits for a lock another process holds (SQLite's busy timeout,
PostgreSQL's lock_timeout) before it gives up and says so."""
OUTBOX_STATES = (
    OutboxStatus.FAILED,
    OutboxStatus.BOUNCED,
    OutboxStatus.PENDING,
    OutboxStatus.SENT,
)
OUTBOX_LIST_LIMIT = 200


def add_commands(sub: Any) -> None:
    def command(
        name: str, handler: Callable[[argparse.Namespace], int], help: str, game: bool = False
    ) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = sub.add_parser(name, help=help, description=help)
        parser.add_argument(
            "--config",
            metavar="FILE",
            help="the config file (default: $SNL_PBEM_CONFIG, then /etc/snl-pbem/config.toml)",
        )
        if game:
            parser.add_argument("game", help="the game's id")
        parser.set_defaults(handler=handler)
        return parser

    chk = command("check-config", cmd_check_config, "check the config and show each game")
    chk.add_argument(
        "--as-service",
        action="store_true",
        help="also check, as the service's user, that it can read the config, boards and "
        "secrets, write the database's folder and run the unit's command (done by itself "
        "when root checks the service's own config)",
    )
    chk.add_argument(
        "--user", help="the service's user (default: User= of the unit, else snl-pbem)"
    )
    chk.add_argument(
        "--unit",
        metavar="FILE",
        help="the systemd unit (default: the installed snl-pbem.service)",
    )
    srv = command("serve", cmd_serve, "run the server: mail intake, deadlines, outbox")
    srv.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    db = command("db", cmd_db, "database schema: 'db upgrade' applies the migrations")
    db.add_argument("action", choices=["upgrade", "current"])
    command("start", cmd_start, "start a game: order keys, round 1, welcome mails", game=True)
    st = command("status", cmd_status, "the referee's view of the games (private)")
    st.add_argument("game", nargs="?")
    st.add_argument("--json", action="store_true")
    command("close-round", cmd_close_round, "close the open round now", game=True)
    ext = command("extend", cmd_extend, "move the open round's deadline later", game=True)
    ext.add_argument("--by", metavar="DURATION", help='e.g. "1d" or "12h"')
    ext.add_argument("--until", metavar="TIME", help="a time, in the game's time zone")
    ing = command("ingest", cmd_ingest, "feed saved .eml files through the mail intake")
    ing.add_argument("files", nargs="+", metavar="FILE")
    inb = command(
        "inbound",
        cmd_inbound,
        "incoming mail: 'inbound list' shows what was set aside, 'inbound show ID' one "
        "message as received, 'inbound retry ID' runs a set-aside message again",
    )
    inb.add_argument("action", choices=["list", "show", "retry"])
    inb.add_argument("id", nargs="?", type=int, help="the message's number (from 'list')")
    inb.add_argument("--all", action="store_true", help="list: the latest 50 of any status")
    out = command(
        "outbox",
        cmd_outbox,
        "outgoing mail: 'outbox list' shows what failed, 'outbox show ID' one message "
        "(headers only if it holds an order key), 'outbox retry ID' (or --all-failed) "
        "queues failed mail again for the running server to send",
    )
    out.add_argument("action", choices=["list", "show", "retry"])
    out.add_argument("id", nargs="?", type=int, help="the message's number (from 'list')")
    out.add_argument(
        "--status",
        choices=[*OUTBOX_STATES, "all"],
        default=OutboxStatus.FAILED,
        help="list: mail in this state (default: failed)",
    )
    out.add_argument("--game", help="list, retry --all-failed: only this game's mail")
    out.add_argument("--all-failed", action="store_true", help="retry: every failed message")
    command("pause", cmd_pause, "stop the game's clock", game=True)
    command("resume", cmd_resume, "restart the clock; the deadline moves by the pause", game=True)
    rb = command("rollback", cmd_rollback, "reopen the last closed round", game=True)
    rb.add_argument(
        "--force",
        action="store_true",
        help="also discard orders already sent for the round after it, and reopen a "
        "finished game whose reveal the players have seen",
    )
    nr = command(
        "notify-restored",
        cmd_notify_restored,
        "after restoring the database from a backup: tell every player what now counts "
        "(the open round, its deadline, their orders as the server has them; what they "
        "sent later must be sent again)",
    )
    nr.add_argument("game", nargs="?", help="only this game (default: every game in play)")
    nr.add_argument(
        "--again",
        action="store_true",
        help="tell the players once more of a restore they were told of already",
    )


def _config(args: argparse.Namespace) -> Config:
    """The config, without the mail passwords (only serve uses them) and, for a command
    that only reads, without the DKIM key: such a command needs no mail secret."""
    path = config_path(args.config)
    try:
        config = load_config(
            path, passwords=False, signing_key=not _reads_only(args), leave_out_bad_games=True
        )
    except ConfigError as exc:
        raise CommandError(str(exc)) from None
    for bad in config.left_out:  # the other games' commands still run, as serve does
        print(
            f"snl-pbem {args.command}: warning: {bad.file} has problems, its game is left out "
            "(snl-pbem check-config shows them)",
            file=sys.stderr,
        )
    return config


def _reads_only(args: argparse.Namespace) -> bool:
    """A command that queues no mail (so signs none): it needs no DKIM key."""
    if args.command in ("status", "db", "outbox", "site"):
        return True
    return bool(args.command == "inbound" and args.action != "retry")


def _database(config: Config, *, check: bool = True) -> Database:
    wait_ms = int(LOCK_WAIT_SECONDS * 1000)
    if make_url(config.database_url).get_backend_name() == "sqlite":
        db = Database(config.database_url, sqlite_busy_ms=wait_ms)
    else:  # PostgreSQL waits for a lock for ever unless told not to
        db = Database(config.database_url, connect_args={"options": f"-c lock_timeout={wait_ms}"})
    if check:
        try:
            check_schema(db)
        except SchemaOutOfDate as exc:
            db.dispose()
            raise CommandError(str(exc)) from None
    return db


def _zone(config: Config, game_name: str | None = None) -> ZoneInfo:
    """Where a command shows times: the game's zone, else the config's ``timezone``."""
    if game_name is not None and game_name in {g.id for g in config.games}:
        return config.game(game_name).tz
    return zone(config.settings.timezone)


def _run(action: Callable[[], Any]) -> Any:
    try:
        return action()
    except LifecycleError as exc:
        raise CommandError(str(exc)) from None


def cmd_serve(args: argparse.Namespace) -> int:
    return serve(config_path(args.config), args.log_level)


def cmd_check_config(args: argparse.Namespace) -> int:
    path = config_path(args.config)
    try:
        config = load_config(path, passwords=False, leave_out_bad_games=True)
    except ConfigError as exc:
        raise CommandError(str(exc)) from None
    bad_files = [problem for bad in config.left_out for problem in bad.problems]
    try:
        notes = _check_service(config, args)
    except CommandError as exc:
        if not bad_files:
            raise
        notes, bad_files = [], [*bad_files, str(exc)]
    settings = config.settings
    if config.left_out:  # the good games are shown; the bad files' problems end it (exit 2)
        print(f"{config.path}: {counted(len(config.left_out), 'game file')} with problems")
    else:
        print(f"{config.path}: OK")
    print(f"  database: {config.database_url.split('@')[-1]}")
    if settings.games_dir is not None:
        print(
            f"  games_dir: {settings.games_dir}, {counted(len(config.game_files), 'game file')}"
            + (f", {len(config.left_out)} with problems" if config.left_out else "")
        )
    mail = settings.mail
    intakes = [name for name in ("imap", "lmtp") if getattr(mail, name) is not None]
    login = ""
    if mail.smtp is not None:
        who = mail.smtp.username
        login = f" (logging in as {who})" if who else " (no login: a relay without a password)"
    print(
        f"  game address: {mail.address}; referee: {mail.referee}; "
        f"mail in: {', '.join(intakes) or 'none configured'}; "
        f"mail out: {'smtp ' + mail.smtp.host + login if mail.smtp else 'none configured'}"
    )
    if mail.lmtp is not None:
        print(f"  {_lmtp_line(mail.lmtp)}")
    if settings.web is not None:
        linked = (
            f"players reach them at {settings.web.base_url}"
            if settings.web.base_url
            else ("no base_url: reports carry no link")
        )
        print(f"  game pages: written to {settings.web.dir}; {linked}")
    for game in config.games:
        s = game.settings
        tz = game.tz
        length = format_duration(s.round_length) if s.round_length else "as listed"
        print(
            f"  game {game.id}: {s.title or '(no title)'}"
            + (f" ({game.file})" if game.file is not None else "")
        )
        print(f"    players ({len(s.players)}): " + ", ".join(p.name for p in s.players))
        print(
            f"    board: {game.board.rows}x{game.board.columns}, "
            f"{counted(len(game.board.snakes), 'snake')}, "
            f"{counted(len(game.board.ladders), 'ladder')}, last space {game.board.last}"
        )
        rules = (
            f"two-turn rounds from round {s.double_from_round}"
            if s.ruleset == "postal"
            else f"{s.ruleset} rules: "
            + ", ".join(f"{key} = {value}" for key, value in s.options.items())
        )
        print(
            f"    schedule ({tz.key}): round 1 {show(game.schedule.deadline(1), tz)}, "
            f"round 2 {show(game.schedule.deadline(2), tz)}, then every {length}; {rules}"
        )
        for player in s.players:
            if player.key is not None and len(player.key) < WEAK_BELOW:
                print(
                    f"    warning: {player.name}'s key is shorter than {WEAK_BELOW} "
                    "characters; a generated key (leave key out) is much harder to guess"
                )
    if mail.referee_key is None:
        print(
            "  warning: mail.referee_key is not set: referee commands by mail are off "
            "(set it to use EXTEND, PAUSE, STATUS... by mail)"
        )
    for note in notes:
        print(f"  {note}")
    if bad_files:
        raise CommandError(
            "\n".join(bad_files)
            + f"\nserve leaves out the game of a file with problems and runs the other "
            f"{counted(len(config.games), 'game')} (a reload keeps the version it runs)"
        )
    return 0


def _lmtp_line(lmtp: LmtpSettings) -> str:
    """What [mail.lmtp] does: where it listens, whose receipt times count, and how mail
    the MTA queued while serve was down comes in after a restart (ETRN, then the grace)."""
    if lmtp.etrn is not None:
        host, port = lmtp.etrn
        etrn = f"ETRN to {f'[{host}]' if ':' in host else host}:{port}"
    else:
        etrn = "no ETRN"
    grace = (
        f"rounds wait up to {format_duration(lmtp.redelivery_grace)}"
        if lmtp.redelivery_grace > timedelta(0)
        else "no grace"
    )
    times = (
        f"by {lmtp.mta_hostname} (at most {format_duration(lmtp.max_queue_time)} old)"
        if lmtp.mta_hostname
        else "not used"
    )
    return (
        f"lmtp: {lmtp.protocol.upper()} on {lmtp.host}:{lmtp.port}; the MTA's receipt times: "
        f"{times}; after a restart: {etrn}, {grace}"
    )


def _check_service(config: Config, args: argparse.Namespace) -> list[str]:
    """The passwords where the service will read them and, as its user, the rest of what
    it needs (snl_pbem.cli.service); problems raise CommandError, notes are returned."""
    try:
        return service_check(
            config,
            forced=args.as_service or args.user is not None,
            user=args.user,
            unit_file=Path(args.unit) if args.unit else None,
        )
    except ConfigError as exc:
        raise CommandError(str(exc)) from None


def cmd_db(args: argparse.Namespace) -> int:
    config = _config(args)
    db = _database(config, check=False)
    try:
        if args.action == "current":
            print(f"schema revision {current_revision(db) or 'none'} (newest {head_revision()})")
            return 0
        before = current_revision(db)
        upgrade(db)
        after = current_revision(db)
        print(
            f"database schema: {before or 'empty'} -> {after}"
            if before != after
            else f"database schema already at {after}"
        )
        return 0
    finally:
        db.dispose()


def cmd_start(args: argparse.Namespace) -> int:
    config = _config(args)
    db = _database(config)
    try:
        now = utcnow()
        for line in sync_games(db, config, now, actor="start").lines:
            print(f"config: {line}")
        report = _run(lambda: start_game(db, config, args.game, now, via="cli"))
        tz = config.game(args.game).tz
        print(
            f"{args.game}: started; round 1 deadline {show(report.round_deadline, tz)}; "
            f"{counted(report.generated, 'key')} generated; "
            f"{counted(report.welcomes, 'welcome mail')} queued"
        )
        return 0
    finally:
        db.dispose()


def cmd_status(args: argparse.Namespace) -> int:
    config = _config(args)
    db = _database(config)
    try:
        games = _run(lambda: status(db, args.game))
    finally:
        db.dispose()
    if args.json:
        sys.stdout.write(json.dumps([g.as_json() for g in games], indent=2, sort_keys=True) + "\n")
    else:
        for game in games:
            sys.stdout.write(render_status(game))
    return 0


def cmd_close_round(args: argparse.Namespace) -> int:
    config = _config(args)
    db = _database(config)
    try:
        dbs = config.settings.database
        outcome = _run(
            lambda: close_with_backup(
                db,
                args.game,
                utcnow(),
                backups=dbs.backups,
                backup_dir=dbs.backup_dir,
                actor="referee",
                config=config,
                via="cli",
            )
        )
    finally:
        db.dispose()
    if outcome is None:
        raise CommandError(f"{args.game}: no round is open")
    tz = _zone(config, args.game)
    positions = ", ".join(f"{n} {p}" for n, p in ranked(outcome.adjudication.positions))
    print(f"{args.game}: round {outcome.round} closed; positions: {positions}")
    if outcome.next_round is not None and outcome.next_deadline is not None:
        print(f"  round {outcome.next_round} open, deadline {show(outcome.next_deadline, tz)}")
    else:
        result = outcome.adjudication.result
        assert result is not None
        print(
            f"  game over: {'draw between ' if result.is_draw else 'winner '}"
            f"{', '.join(result.winners)}"
        )
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    """Exit 0 when every file was stored and processed, 1 if one failed, 2 if one is unreadable."""
    config = _config(args)
    db = _database(config)
    unreadable = failed = 0
    try:
        for name in args.files:
            path = Path(name)
            try:
                raw = path.read_bytes()
            except OSError as exc:
                print(f"{path}: cannot read: {exc.strerror or exc}", file=sys.stderr)
                unreadable += 1
                continue
            result = ingest(db, config, raw, utcnow(), f"file:{path.name}")
            print(f"{path}: {result.status}" + (f" ({result.detail})" if result.detail else ""))
            failed += result.status == InboundStatus.SET_ASIDE
    finally:
        db.dispose()
    return 2 if unreadable else 1 if failed else 0


def cmd_extend(args: argparse.Namespace) -> int:
    config = _config(args)
    tz = _zone(config, args.game)
    try:
        by = parse_duration(args.by) if args.by else None
        until = parse_time(args.until, tz) if args.until else None
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    db = _database(config)
    try:
        new = _run(
            lambda: extend(db, args.game, utcnow(), by=by, until=until, config=config, via="cli")
        )
    finally:
        db.dispose()
    print(f"{args.game}: deadline now {show(new, tz)}")
    return 0


def cmd_inbound(args: argparse.Namespace) -> int:
    """Set-aside incoming mail: see it, read it, run it again (after fixing the cause)."""
    if args.action != "list" and args.id is None:
        raise CommandError(f"inbound {args.action}: give the message's number (see 'inbound list')")
    config = _config(args)
    db = _database(config)
    try:
        if args.action == "retry":
            try:
                result = retry_set_aside(db, config, args.id, utcnow(), via="cli")
            except LookupError as exc:
                raise CommandError(str(exc)) from None
            print(
                f"inbound {args.id}: {result.status}"
                + (f" ({result.detail})" if result.detail else "")
            )
            return 1 if result.status == InboundStatus.SET_ASIDE else 0
        if args.action == "show":
            row = inbound_message(db, args.id)
            print(
                f"inbound {row.id}: {row.status}, received "
                f"{show(row.received_at, _zone(config))} "
                f"from {row.sender or '?'} via {row.source}",
                file=sys.stderr,
            )
            if row.error:
                print(row.error.rstrip(), file=sys.stderr)
            sys.stdout.buffer.write(row.raw)  # as received: save it with > message.eml
            sys.stdout.flush()
            return 0
        rows = inbound_messages(db, everything=args.all)
        if not rows:
            print("no incoming mail set aside" if not args.all else "no incoming mail")
        for row in rows:
            why = (row.error or "").strip().splitlines()
            sender = (row.sender or _from_header(row.raw))[:40]
            print(
                f"{row.id:>6}  {show(row.received_at, _zone(config)):<29} {row.status:<9} "
                f"{sender:<40}  {why[-1][:80] if why else ''}"
            )
        return 0
    finally:
        db.dispose()


def cmd_outbox(args: argparse.Namespace) -> int:
    """Outgoing mail: what failed (or bounced), one message as stored, and sending again."""
    if args.action == "show" and args.id is None:
        raise CommandError("outbox show: give the message's number (see 'outbox list')")
    if args.action == "retry" and (args.id is None) == (not args.all_failed):
        raise CommandError("outbox retry: give a message's number or --all-failed (not both)")
    config = _config(args)
    db = _database(config)
    try:
        if args.action == "retry":
            return _outbox_retry(db, config, args)
        if args.action == "show":
            return _outbox_show(db, args.id, _zone(config))
        return _outbox_list(db, args.status, args.game, _zone(config))
    finally:
        db.dispose()


def _outbox_retry(db: Database, config: Config, args: argparse.Namespace) -> int:
    try:
        done = _run(
            lambda: retry_mail(
                db,
                utcnow(),
                referee=config.settings.mail.referee,
                outbox_id=args.id,
                game_name=args.game if args.all_failed else None,
                via="cli",
            )
        )
    except LookupError as exc:
        raise CommandError(str(exc)) from None
    if args.id is not None and done[0].refused is not None:
        raise CommandError(f"outbox {args.id}: left failed: {done[0].refused}")
    if not done:
        print("no failed mail to retry")
    for item in done:
        if item.refused is not None:
            print(f"outbox {item.id}: left failed: {item.refused}", file=sys.stderr)
        else:
            print(f"outbox {item.id}: {item.kind} to {item.recipient} queued again")
    if any(item.refused is None for item in done):
        print("the running server sends it within 15 seconds (snl-pbem status shows what waits)")
    return 0


def _outbox_show(db: Database, outbox_id: int, tz: ZoneInfo) -> int:
    row, game_name = outbox_message(db, outbox_id)
    print(
        f"outbox {row.id}: {row.status}, {row.kind} to {row.recipient}"
        + (f" (game {game_name})" if game_name else "")
        + f", {counted(row.attempts, 'attempt')}, written {show(row.created_at, tz)}"
        + (f", sent {show(row.sent_at, tz)}" if row.sent_at else ""),
        file=sys.stderr,
    )
    if row.last_error:
        print(f"last error: {row.last_error.rstrip()}", file=sys.stderr)
    if is_trimmed_sent(row.message):  # see keep_sent_mail
        print(
            f"outbox {row.id}: its body was removed after keep_sent_mail: its headers and "
            "a fingerprint of its lines are kept",
            file=sys.stderr,
        )
        sys.stdout.buffer.write(row.message)
    elif row.secret:  # an order key: never on a terminal, in a scrollback or a pasted log
        print(
            f"outbox {row.id}: headers only: the body holds {row.recipient}'s order key",
            file=sys.stderr,
        )
        sys.stdout.buffer.write(row.message.split(b"\r\n\r\n", 1)[0] + b"\r\n")
    else:
        sys.stdout.buffer.write(row.message)  # as sent: save it with > message.eml
    sys.stdout.flush()
    return 0


def _outbox_list(db: Database, state: str, game_name: str | None, tz: ZoneInfo) -> int:
    rows, total = outbox_messages(db, state, game_name, OUTBOX_LIST_LIMIT)
    what = "mail" if state == "all" else f"{state} mail"
    if not rows:
        print(f"no {what}" + (f" for {game_name}" if game_name else ""))
        return 0
    print(
        f"{'id':>6}  {'game':<10} {'kind':<16} {'recipient':<32} {'status':<8} tries "
        f"{'created':<29} last error"
    )
    for row, game_name in rows:
        error = (row.last_error or "").strip().splitlines()
        print(
            f"{row.id:>6}  {(game_name or '-'):<10} {row.kind:<16} {row.recipient[:32]:<32} "
            f"{row.status:<8} {row.attempts:>5} {show(row.created_at, tz):<29} "
            f"{error[0][:100] if error else ''}"
        )
    if total > len(rows):
        print(f"(the newest {len(rows)} of {total} shown)")
    return 0


def _from_header(raw: bytes) -> str:
    """The From header of a message that was never parsed (set aside), for the list only."""
    try:
        value = BytesHeaderParser(policy=policy.compat32).parsebytes(raw[:65536])["From"]
    except Exception:  # a broken header: the list still shows the message
        return "?"
    return " ".join(str(value).split()) if value else "?"


def cmd_pause(args: argparse.Namespace) -> int:
    config = _config(args)
    db = _database(config)
    try:
        _run(lambda: pause(db, args.game, utcnow(), config=config, via="cli"))
    finally:
        db.dispose()
    print(f"{args.game}: paused (its deadline will not fire until resume; players are told)")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    config = _config(args)
    db = _database(config)
    try:
        now = utcnow()
        new = _run(lambda: resume(db, args.game, now, config=config, via="cli"))
    finally:
        db.dispose()
    shown = show(new, _zone(config, args.game))
    if new <= now:
        print(f"{args.game}: resumed; its deadline {shown} has passed: the round closes at once")
    else:
        print(f"{args.game}: resumed; deadline now {shown}")
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    config = _config(args)
    db = _database(config)
    now = utcnow()
    try:
        number = _run(
            lambda: rollback_round(db, args.game, now, force=args.force, via="cli", config=config)
        )
        [game] = status(db, args.game)
    finally:
        db.dispose()
    kept = (
        "results discarded, its orders kept"
        if not args.force
        else f"results discarded, its orders kept, any for round {number + 1} discarded"
    )
    deadline = (
        f"its deadline {game.deadline_shown} has passed: resume closes it again at once"
        if game.deadline is not None and game.deadline <= now
        else f"its deadline {game.deadline_shown} is stopped until resume"
    )
    print(
        f"{args.game}: round {number} reopened ({kept}); the game is paused and the players "
        f"are told; {deadline}. Correct what you need, then close-round or resume"
    )
    return 0


def cmd_notify_restored(args: argparse.Namespace) -> int:
    """After a restore from a backup: every player of each game in play is told what now
    counts (snl_pbem.app.reopened.notify_restored)."""
    config = _config(args)
    db = _database(config)
    try:
        now = utcnow()
        report = _run(
            lambda: notify_restored(db, config, now, args.game, via="cli", again=args.again)
        )
    finally:
        db.dispose()
    if report.records_end is not None:
        print(f"the database's records end at {show(report.records_end, _zone(config))}")
    if report.waiting:
        print(
            f"{counted(report.waiting, 'message')} it holds unsent go out when the service "
            "starts (some may have gone out before the restore: a player may get them twice)"
        )
    refused = False
    for item in report.games:
        if item.skipped is not None:
            print(f"{item.game}: {item.skipped}: nobody told")
            continue
        if item.told_before is not None:
            refused = True
            print(
                f"{item.game}: its players were told of this restore at "
                f"{show(item.told_before, _zone(config, item.game))} already: nobody told "
                "(notify-restored --again tells them once more)",
                file=sys.stderr,
            )
            continue
        assert item.deadline is not None
        deadline = show(item.deadline, _zone(config, item.game))
        when = (
            "has passed: the round closes as soon as the service runs"
            if item.passed
            else "is ahead"
        )
        print(
            f"{item.game}: round {item.round} open, its deadline {deadline} {when}; "
            f"{item.told} told (players and observers)"
        )
    if not report.games:
        print("no games in the database")
    return 2 if refused else 0
