"""A private Postfix for the test run (Debian's postfix package), set up as
deploy/postfix-lmtp.md says, with the guide's own lines (``guide_files`` reads them
there, so the guide and the test cannot drift apart): the game's domain is a relay
domain whose only recipient is the game address, and the transport map hands that
address to snl-pbem over LMTP. Everything else is Postfix's default (retries, queue runs,
ETRN).

It has its own config_directory and queue_directory in a temporary folder, listens
for SMTP on a free port of 127.0.0.1, and trusts only 127.0.0.1/32 (``mynetworks``):
a client bound to 127.0.0.2 is "outside", as a player's provider is.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

GUIDE_PATH = Path(__file__).parents[1] / "deploy" / "postfix-lmtp.md"
HOSTNAME = "mx.snl-test.example"
"""Postfix's myhostname: what it writes in its Received header's ``by`` clause."""

MAIN_CF = """\
compatibility_level = 3.6
queue_directory = {d}/spool
data_directory = {d}/data
mail_owner = postfix
setgid_group = postdrop
myhostname = {hostname}
mydomain = snl-test.example
myorigin = $myhostname
mydestination =
local_recipient_maps =
local_transport = error:no local delivery here
alias_maps =
alias_database =
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
mynetworks = 127.0.0.1/32
smtpd_peername_lookup = no
smtp_dns_support_level = disabled
biff = no
maillog_file_prefixes = {d}
maillog_file = {d}/postfix.log
# Postfix's defaults: a deferred message waits at least minimal_backoff_time (300 s) and
# for a queue run (queue_run_delay, 300 s), unless asked for with ETRN or postqueue -f
# --- deploy/postfix-lmtp.md ---
{guide}
"""


def guide_files(address: str, lmtp_port: int, etc: Path) -> dict[str, str]:
    """The guide's Postfix files (its code blocks that begin ``# /etc/postfix/NAME``) by
    NAME, as written there, for ``address`` delivered to ``lmtp_port``, in ``etc``."""
    text = GUIDE_PATH.read_text()
    local, _, domain = address.partition("@")
    files: dict[str, str] = {}
    for block in re.findall(r"^```\n# /etc/postfix/(.*?)```$", text, re.S | re.M):
        first, _, body = block.partition("\n")
        name = first.split()[0]
        body = (
            body.replace("/etc/postfix/", f"{etc}/")
            .replace("127.0.0.1:8024", f"127.0.0.1:{lmtp_port}")
            .replace("snl@example.org", f"{local}@{domain}")
            .replace("example.org", domain)
        )
        files[name] = body
    assert {"main.cf", "relay_recipients", "transport"} <= set(files), sorted(files)
    return files


MASTER_CF = """\
{port} inet n - n - - smtpd
pickup    unix  n       -       n       60      1       pickup
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
showq     unix  n       -       n       -       -       showq
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
lmtp      unix  -       -       n       -       -       lmtp
smtp      unix  -       -       n       -       -       smtp
anvil     unix  -       -       n       -       1       anvil
scache    unix  -       -       n       -       1       scache
postlog   unix-dgram n  -       n       -       1       postlogd
"""


class PostfixUnavailable(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostfixServer:
    def __init__(self, address: str, lmtp_port: int) -> None:
        self.binary = shutil.which("postfix") or "/usr/sbin/postfix"
        if not os.path.exists(self.binary):
            raise PostfixUnavailable("postfix is not installed (Debian: postfix)")
        if os.geteuid() != 0:
            raise PostfixUnavailable("the private Postfix needs root (it drops to postfix)")
        try:
            pwd.getpwnam("postfix")
        except KeyError:
            raise PostfixUnavailable("no postfix user (install Debian's postfix)") from None
        self.dir = Path(tempfile.mkdtemp(prefix="snl-postfix-"))
        os.chmod(self.dir, 0o755)
        self.etc = self.dir / "etc"
        self.host = "127.0.0.1"
        self.port = _free_port()
        self.address = address
        self.lmtp_port = lmtp_port
        self.hostname = HOSTNAME

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            list(args), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
        )
        if check and result.returncode != 0:
            raise PostfixUnavailable(
                f"{' '.join(args)} failed ({result.returncode}): {result.stderr}{self.log()}"
            )
        return result

    def start(self, guide: bool = True) -> PostfixServer:
        """Configure and start; ``guide=False`` is the old guide (transport_maps alone)."""
        try:
            self._start(guide)
        except BaseException:
            self.remove()
            raise
        return self

    def _start(self, guide: bool) -> None:
        d = self.dir
        for sub in ("etc", "data", "spool"):
            (d / sub).mkdir(exist_ok=True)
        owner = pwd.getpwnam("postfix")
        os.chown(d / "data", owner.pw_uid, owner.pw_gid)
        files = guide_files(self.address, self.lmtp_port, self.etc)
        text = files.pop("main.cf")
        if not guide:  # the old guide: transport_maps alone
            text = "".join(line for line in text.splitlines(True) if "relay_" not in line)
        (self.etc / "main.cf").write_text(MAIN_CF.format(d=d, hostname=self.hostname, guide=text))
        (self.etc / "master.cf").write_text(MASTER_CF.format(port=f"127.0.0.1:{self.port}"))
        for name, body in files.items():  # the tables; postmap as the guide says
            (self.etc / name).write_text(body)
            self._run("postmap", "-c", str(self.etc), f"hash:{self.etc / name}")
        self._run(self.binary, "-c", str(self.etc), "start")
        self.wait_ready()

    def wait_ready(self, seconds: float = 120) -> None:
        """Until it greets; the limit is a hang detector (it takes well under a second)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((self.host, self.port), timeout=1) as sock:
                    if sock.recv(100).startswith(b"220"):
                        return
            except OSError:
                time.sleep(0.1)
        raise PostfixUnavailable(f"postfix is not answering on {self.port}: {self.log()}")

    def queue(self) -> str:
        return self._run("postqueue", "-c", str(self.etc), "-p", check=False).stdout

    def log(self) -> str:
        path = self.dir / "postfix.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._run(self.binary, "-c", str(self.etc), "stop", check=False)
        pid_file = self.dir / "spool" / "pid" / "master.pid"
        for _ in range(1200):  # until it has exited (at most 60 s: a busy machine)
            try:
                pid = int(pid_file.read_text().split()[0])
                os.kill(pid, 0)
            except (OSError, ValueError, IndexError):
                break
            time.sleep(0.05)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
