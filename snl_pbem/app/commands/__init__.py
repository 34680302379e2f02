"""Every email command, registered once (see registry.py): one module per group, each
command one entry. Importing this package registers them all, and gives HELP's template
its list of commands (the ``command_help`` global of snl_pbem.mail.render)."""

from __future__ import annotations

from snl_pbem.app.commands import (  # noqa: F401 (each registers its commands)
    envelope,
    help,
    language,
    orders,
    player,
    referee,
    signup,
    status,
)
from snl_pbem.app.commands.registry import (
    Command,
    Run,
    Who,
    commands,
    help_lines,
    lookup,
    read,
    reading_table,
    register,
    register_order_words,
    unregister,
)
from snl_pbem.mail.render import add_global

add_global("command_help", help_lines)

__all__ = [
    "Command",
    "Run",
    "Who",
    "commands",
    "help_lines",
    "lookup",
    "read",
    "reading_table",
    "register",
    "register_order_words",
    "unregister",
]
