"""Offline tools: replaying a game from its replay file, and its text view."""
