"""Email in and out: composing messages, rendering templates (intake and sending come later)."""
