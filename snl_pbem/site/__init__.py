"""The game pages: a static web site of every game, kept up to date (issue 24)."""
