"""The use cases, each a plain function over the database: games, rounds, referee,
intake, reports, outbox, bounces, retention, schedule and mailbox_state."""
