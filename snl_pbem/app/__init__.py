"""The use cases, each a plain function over a session: games, rounds, referee, intake,
reports, outbox, bounces, retention."""
