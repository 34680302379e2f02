"""Files a command creates belong to the service, whoever runs the command.

The service runs as its own user with ``UMask=0027`` (deploy/snl-pbem.service), so what it
writes is 0640 (folders 0750), owned by that user and its group. A referee command run by
root (``sudo snl-pbem close-round``) would leave root's files in the service's folder: a
backup the service can never delete, readable by anyone, or a new database the service
cannot open. So a file or folder a command creates there (the database, a backup and its
folder) is given the service's mode and, when root made it, the owner and group of the
folder that holds it (the state directory is the service's). SQLite gives its -wal and
-shm files the database file's owner and mode by itself.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

FILE_MODE = 0o640
DIR_MODE = 0o750


def adopt(path: Path) -> None:
    """Give ``path``, just created by this process, the service's mode (0640; a folder
    0750) and, when running as root, the owner and group of the folder holding it."""
    try:
        info = path.lstat()
        parent = path.parent.stat()
    except OSError:
        return
    if stat.S_ISLNK(info.st_mode):
        return
    wanted = DIR_MODE if stat.S_ISDIR(info.st_mode) else FILE_MODE
    if os.geteuid() == 0 and (info.st_uid, info.st_gid) != (parent.st_uid, parent.st_gid):
        os.chown(path, parent.st_uid, parent.st_gid, follow_symlinks=False)
    if stat.S_IMODE(info.st_mode) != wanted:
        with contextlib.suppress(PermissionError):  # not ours to change
            os.chmod(path, wanted)


def make_dirs(folder: Path) -> None:
    """``mkdir -p``; each folder it creates is adopted (see :func:`adopt`)."""
    missing = []
    current = folder
    while not current.exists() and current != current.parent:
        missing.append(current)
        current = current.parent
    folder.mkdir(parents=True, exist_ok=True)
    for created in reversed(missing):
        adopt(created)


def create_file(path: Path) -> bool:
    """Create ``path`` empty if it does not exist and adopt it; True if it was created."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
    except FileExistsError:
        return False
    except PermissionError:
        if path.exists():
            return False
        raise
    os.close(fd)
    adopt(path)
    return True
