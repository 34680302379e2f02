"""The plain email address as patterns, one definition for every place that reads one
without a parser (the config's addresses, SMTP's and LMTP's commands, a message's From):
what they all take for plain must be the same thing."""

ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
"""A run of ASCII atext (RFC 5322 §3.2.3): one word to every address parser."""
PLAIN_ADDRESS = rf"{ATOM}(?:\.{ATOM})*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
"""``local@domain``: a dot-atom of atext, then dotted labels of letters, digits and
hyphens."""
