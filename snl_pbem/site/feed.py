"""A game's Atom feed: one entry per round report, as the reports told it (positions
only, R19), newest first; written with feedgen."""

from __future__ import annotations

from datetime import UTC, datetime

from feedgen.feed import FeedGenerator

from snl_pbem.app.reports import standings
from snl_pbem.site.pages import GamePage


def atom_feed(page: GamePage, page_url: str, feed_url: str, address: str) -> bytes:
    """The feed's bytes. ``page_url`` and ``feed_url`` are absolute when the site has a
    ``base_url``, else relative to the feed; ``address`` is the game address, whose
    domain makes the ids this server's own (RFC 4151 tag URIs) and which is the feed's
    author (RFC 4287 4.1.1: a feed has one)."""
    domain = address.rpartition("@")[2]
    feed = FeedGenerator()
    feed.id(f"tag:{domain},2026:{page.name}")
    feed.author({"name": f"The {page.name} referee", "email": address})
    feed.title(f"{page.title}: round reports")
    feed.subtitle(f"Positions after every round of {page.title} (Snakes and Ladders by email)")
    feed.link(href=page_url, rel="alternate")
    feed.link(href=feed_url, rel="self")
    feed.language("en")
    feed.generator("snl-pbem")
    newest = max((r.closed_at for r in page.rounds if r.closed_at), default=page.updated)
    feed.updated(_utc(newest))
    for row in page.rounds:  # feedgen puts the last added first
        when = _utc(row.closed_at or page.updated)
        entry = feed.add_entry()
        entry.id(f"tag:{domain},2026:{page.name}:round-{row.number}")
        entry.title(f"{page.title}: round {row.number} report")
        entry.link(href=f"{page_url}#round-{row.number}", rel="alternate")
        entry.published(when)
        entry.updated(when)
        lines = [f"Positions after round {row.number}:"]
        lines += [f"{s.place:<4} {s.name}  {s.position}" for s in standings(row.positions)]
        if row is page.rounds[-1] and page.result:
            lines.append(page.result)
        entry.content("\n".join(lines), type="text")
    xml: bytes = feed.atom_str(pretty=True)
    return xml


def _utc(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
