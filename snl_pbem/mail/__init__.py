"""Email in and out, with no game logic: reading messages (parse, the order language, the
sandbox, DSNs, Received: lines), composing and rendering ours, and the IMAP, LMTP and SMTP
protocols."""
