"""The long-running parts: the server, its scheduler and its mailboxes (timing and wiring)."""
