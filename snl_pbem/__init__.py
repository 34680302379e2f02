"""snl-pbem: a play-by-email server that referees Postal Snakes and Ladders."""

__version__ = "0.1.0"
