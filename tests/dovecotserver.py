"""A private Dovecot IMAP server for the test run (Debian's dovecot-imapd).

Configured as DESIGN.md describes: its own folder, plaintext login on a free
loopback port, Maildir storage. Each test asks for a fresh mailbox user.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

CONF = """base_dir = {d}/run
state_dir = {d}/run/state
log_path = {d}/dovecot.log
protocols = imap
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
default_login_user = dovenull
default_internal_user = dovecot
default_internal_group = dovecot
service imap-login {{
  inet_listener imap {{
    port = {port}
  }}
  chroot =
}}
service anvil {{
  chroot =
}}
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {d}/users
}}
userdb {{
  driver = static
  args = uid=dovecot gid=dovecot home={d}/mail/%u
}}
mail_location = maildir:~/Maildir
first_valid_uid = 1
"""


USERS = 300


class DovecotUnavailable(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DovecotServer:
    def __init__(self) -> None:
        self.binary = shutil.which("dovecot") or "/usr/sbin/dovecot"
        if not os.path.exists(self.binary):
            raise DovecotUnavailable("dovecot is not installed (Debian: dovecot-imapd)")
        if os.geteuid() != 0:
            raise DovecotUnavailable("the private Dovecot needs root (it drops to dovecot)")
        self.dir = Path(tempfile.mkdtemp(prefix="snl-dovecot-"))
        os.chmod(self.dir, 0o755)
        self.port = _free_port()
        self.host = "127.0.0.1"

    def start(self) -> DovecotServer:
        d = self.dir
        (d / "run").mkdir()
        (d / "mail").mkdir()
        user = pwd.getpwnam("dovecot")
        os.chown(d / "mail", user.pw_uid, user.pw_gid)
        # Dovecot re-reads its passwd-file by mtime (1 s resolution): make every user now.
        self._users = [f"u{uuid.uuid4().hex[:10]}" for _ in range(USERS)]
        (d / "users").write_text("".join(f"{u}:{{PLAIN}}secret\n" for u in self._users))
        (d / "dovecot.conf").write_text(CONF.format(d=d, port=self.port))
        self._launch()
        return self

    def _launch(self) -> None:
        # dovecot daemonizes: its output goes to a file, never to a pipe we would wait on
        with open(self.dir / "startup.log", "ab") as out:
            code = subprocess.call(
                [self.binary, "-c", str(self.dir / "dovecot.conf")],
                stdout=out,
                stderr=out,
                stdin=subprocess.DEVNULL,
                timeout=120,
            )
        if code != 0:
            startup = (self.dir / "startup.log").read_text()
            raise DovecotUnavailable(f"dovecot did not start: {startup}{self.log()}")
        self.wait_ready()

    def wait_ready(self, seconds: float = 120) -> None:
        """Until it greets; the limit is a hang detector (it takes well under a second)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((self.host, self.port), timeout=1) as sock:
                    if sock.recv(100).startswith(b"* OK"):
                        return
            except OSError:
                time.sleep(0.1)
        raise DovecotUnavailable(f"dovecot is not answering on {self.port}: {self.log()}")

    def log(self) -> str:
        path = self.dir / "dovecot.log"
        return path.read_text()[-3000:] if path.exists() else ""

    def pid(self) -> int | None:
        path = self.dir / "run" / "master.pid"
        return int(path.read_text()) if path.exists() else None

    def stop(self, sessions_too: bool = False) -> None:
        """Stop the server; with ``sessions_too`` also kill the IMAP sessions, which Dovecot
        otherwise lets finish on their own (a host going down takes them with it)."""
        pid = self.pid()
        sessions = self._sessions() if sessions_too else []
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            for _ in range(1200):  # until it has exited (at most 60 s: a busy machine)
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)
        for session in sessions:
            with contextlib.suppress(ProcessLookupError):
                os.kill(session, signal.SIGKILL)

    def start_again(self) -> None:
        """Start a server that was stopped (same port, same mailboxes)."""
        self._launch()

    def running(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=1):
                return True
        except OSError:
            return False

    def restart(self) -> None:
        self.stop()
        self._launch()

    def drop_connections(self) -> None:
        """Kill every IMAP session of this server (as a network failure would)."""
        for session in self._sessions():
            with contextlib.suppress(ProcessLookupError):
                os.kill(session, signal.SIGKILL)

    def _sessions(self) -> list[int]:
        """The pids of this server's IMAP session processes."""
        master = self.pid()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if cmdline.startswith(b"dovecot/imap") and parent == master:
                found.append(int(entry.name))
        return found

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def new_user(self) -> str:
        """A fresh, empty mailbox (password "secret")."""
        if not self._users:
            raise DovecotUnavailable(f"all {USERS} test mailboxes are used")
        return self._users.pop()

    def deliver_to_maildir(self, user: str, raw: bytes) -> Path:
        """Deliver as an MTA's local delivery agent does while IMAP is down: into the user's
        Maildir (tmp/, then renamed into new/). The file's mtime is its INTERNALDATE."""
        maildir = self.dir / "mail" / user / "Maildir"
        owner = pwd.getpwnam("dovecot")
        name = f"{time.time():.6f}.{uuid.uuid4().hex}.test"
        for sub in ("tmp", "new", "cur"):
            (maildir / sub).mkdir(parents=True, exist_ok=True)
        tmp = maildir / "tmp" / name
        tmp.write_bytes(raw)
        os.chown(tmp, owner.pw_uid, owner.pw_gid)
        os.chmod(tmp, 0o600)
        final = maildir / "new" / name
        os.rename(tmp, final)
        return final

    def delete_mailbox(self, user: str) -> None:
        """Remove a user's whole Maildir (the next login recreates it: a new UIDVALIDITY)."""
        shutil.rmtree(self.dir / "mail" / user, ignore_errors=True)
