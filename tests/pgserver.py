"""A private PostgreSQL server for the test run: its own data folder, socket and port.

Started once per test session from the installed server binaries (Debian's
postgresql package: /usr/lib/postgresql/<version>/bin), as the postgres user
when running as root, and removed afterwards. Each test gets a fresh database.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path


class PostgresUnavailable(RuntimeError):
    pass


def _bin_dir() -> Path:
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4])
    )
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise PostgresUnavailable("PostgreSQL server binaries (initdb, pg_ctl) are not installed")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    def __init__(self) -> None:
        self.bin = _bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="snl-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._as: list[str] = []
        if os.geteuid() == 0:  # the server refuses to run as root
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                raise PostgresUnavailable("running as root and there is no postgres user") from None
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        done = subprocess.run([*self._as, *args], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            log = self.root / "server.log"
            extra = log.read_text() if log.exists() else ""
            raise PostgresUnavailable(f"{' '.join(args[:2])} failed: {done.stderr}{extra}")

    def start(self) -> PostgresServer:
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
            "-E",
            "UTF8",
        )
        options = (
            f"-k {self.root} -p {self.port} -c listen_addresses='127.0.0.1' "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=200"
        )
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.root / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "300",  # waits only until it is up (a second or two); 300 s: a hang detector
            "start",
        )
        return self

    def restart(self) -> None:
        """Restart the server (every connection is dropped), as an upgrade or a crash would."""
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.root / "server.log"),
            "-m",
            "fast",
            "-w",
            "-t",
            "300",
            "restart",
        )

    def stop(self) -> None:
        try:
            self._run(
                str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"
            )
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(sql)

    def create_database(self) -> str:
        name = "t_" + uuid.uuid4().hex[:12]
        self._admin(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
