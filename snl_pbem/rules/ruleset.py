"""The seam between the application and a ruleset.

The application (``snl_pbem.app``) stores games, orders and results and mails the
players; everything a ruleset decides goes through :class:`Ruleset`:

- which order words its orders use, with their help (``order_words``), and why it
  refuses another ruleset's (``refuse_word``),
- how an order set read from the order language is checked (``read_orders``),
- the default for a player who sent nothing (``default_orders``),
- adjudicating one round from the stored state (``adjudicate``),
- what each player may be told afterwards (``player_view``: for the postal game,
  R19's view and nothing more), and the referee (``referee_view``),
- the whole game told after it ends (``history``), and what a referee checking a board
  should know of it (``board_notes``).

Its views are the ruleset's part of a template's context: a name the server sets too
(``round``, ``player``...) is refused by name (``RulesetError``), never silently lost.

A game's config names its ruleset (``ruleset = "postal"``, the default). Rulesets are
pure, like the rest of ``snl_pbem.rules``: no I/O, no clock, randomness only seeded.
The texts a ruleset's mail needs are its templates, under ``templates/<ruleset>/``;
a ruleset hands them their context as plain mappings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from snl_pbem.rules.board import Board
from snl_pbem.rules.errors import GameSetupError
from snl_pbem.rules.geometry import Position
from snl_pbem.rules.outcome import GameResult, PlayerId, TurnResult


@dataclass(frozen=True)
class RulesetSettings:
    """What is fixed for a game, as its config and its database row give it."""

    board: Board
    double_from_round: int = 7
    trapdoor_rule: str = "all"
    seed: int = 0
    options: Mapping[str, Any] = field(default_factory=dict)
    """The ruleset's own options (a later ruleset's; the postal game has none here)."""


@dataclass(frozen=True)
class Orders:
    """What one message's order lines said, as the order language read them."""

    dice: tuple[int, ...] | None = None
    """The DICE line's values; None when the message had no DICE line."""
    nomination: int | None = None
    """The TRAPDOOR line's space, as written (not yet checked against the board)."""
    clear: bool = False
    """The message had a CLEAR line."""
    withdraw: bool = False
    """CLEAR without new orders: the player takes back what they sent."""
    roll: bool = False
    """The message had a ROLL line ("I am here": the classic game's order, C12)."""


@dataclass(frozen=True)
class OrderWord:
    """An order word a ruleset's orders use, as the app's command registry registers it
    (snl_pbem/app/commands/orders.py): the word, its line of help, and the other spellings
    read as it. The order language (mail/commands.py) must already read the word."""

    word: str
    help: str
    """Its line of help, as a help text shows it ("DICE 4            one value per turn")."""
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class OrderReading:
    """What a ruleset makes of one order set when it arrives."""

    valid: bool
    dice: tuple[int, ...]
    """The dice to store (as sent)."""
    nomination: int | None
    """The nomination to store; None when the one sent is no nomination."""
    problems: tuple[str, ...]
    """Why the orders are not valid, one sentence each (stored with them)."""
    line_problems: tuple[tuple[str, str], ...]
    """(line, why) for lines the ruleset refuses, to show before the others."""
    ack: Mapping[str, Any]
    """The context of the ruleset's orders_ack template (its own part of the reply)."""
    summary: str
    """A few words for the log and the referee: "valid", "invalid dice"."""


@dataclass(frozen=True)
class GameState:
    """A game's state between rounds, as stored: every position, and each player's
    dice since turn ``played_from`` (a ruleset says how far back it needs them)."""

    players: tuple[PlayerId, ...]
    positions: Mapping[PlayerId, Position]
    played: Mapping[PlayerId, tuple[int, ...]]
    rounds_played: int = 0
    turns_played: int = 0
    played_from: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)
    """The ruleset's own state, as its last round's ``Adjudication.record`` kept it
    (the classic game's; empty for the postal game)."""


@dataclass(frozen=True)
class Adjudication:
    """One round, decided: what the application stores and mails."""

    round: int
    turns: tuple[TurnResult, ...]
    """Every player's move in every turn played."""
    positions: Mapping[PlayerId, Position]
    result: GameResult | None
    nmr: Mapping[PlayerId, str]
    """Players the referee moved for, and why (for the referee only)."""
    tally: Mapping[str, Any]
    """The round's private record for the referee: nominations, defaulted, votes,
    threshold, trapdoors, by_lot (the postal game's; another ruleset leaves them empty)."""
    after: GameState
    details: Any = None
    """The ruleset's own record of the round (the postal game's RoundResult)."""
    record: Mapping[str, Any] | None = None
    """What the ruleset keeps of the round in the store (returned as the next round's
    ``GameState.extra``); None keeps nothing."""


@dataclass(frozen=True)
class StoredRound:
    """A closed round as the store keeps it, for the post-game reveal."""

    number: int
    dice: Mapping[PlayerId, Sequence[int]]
    """Each player's dice, turn by turn."""
    tally: Mapping[str, Any] | None
    """``Adjudication.tally`` as kept (None if none was)."""
    record: Mapping[str, Any] | None = None
    """``Adjudication.record`` as kept (None if none was)."""


@dataclass(frozen=True)
class FinishedGame:
    """One finished game of a player, as the store keeps it."""

    player: PlayerId
    """The player's name in that game."""
    result: Mapping[str, Any]
    """The game's stored result (``GameResult.as_json``)."""
    record: Mapping[str, Any]
    """What the ruleset kept of the game's last round (its ``Adjudication.record``)."""


class Ruleset(Protocol):
    """What the application asks of a ruleset. See the module's docstring."""

    name: str
    option_keys: tuple[str, ...]
    """The keys of a game's config table that are this ruleset's options."""
    no_orders: str
    """What a message with no order lines is told, after "Your message had no orders"."""
    throws_dice: bool
    """The server throws the dice from the game's seed (classic, C11): a game with no seed
    in its config gets one drawn at random, kept in the database."""
    history_public: bool
    """Anyone may read ``history`` while the game runs (the classic game: every throw is in
    every report, C10); otherwise only after it ends, when the game reveals (R19)."""

    order_words: tuple[OrderWord, ...]
    """The order words this ruleset's orders use (postal DICE and TRAPDOOR, classic ROLL),
    with their help: the command registry registers them for it."""

    def refuse_word(self, word: str) -> str | None:
        """Why an order word of the order language (DICE, TRAPDOOR, ROLL) is no order in
        this game, for the reply; None for the words this ruleset reads (its
        ``order_words``, as a test checks)."""

    def read_options(self, data: Mapping[str, Any], prefix: str) -> dict[str, Any]:
        """Check the options among ``data`` (GameSetupError naming ``prefix`` + the key)
        and return them as they are kept (defaults filled in)."""

    def awaiting(self, settings: RulesetSettings, state: GameState) -> tuple[PlayerId, ...]:
        """The players whose orders the open round waits for (reminders, and
        close_when_all_in): the postal game's every player, the classic game's those
        still racing. ``state`` holds the players, rounds_played and ``extra`` only (no
        positions or dice: the application asks often and cheaply)."""

    def check_settings(self, settings: RulesetSettings) -> None:
        """Raise GameSetupError naming the key when the settings cannot be played."""

    def turns_in_round(self, settings: RulesetSettings, round_number: int) -> int:
        """How many turns round ``round_number`` has."""

    def history_start(self, turns_played: int) -> int:
        """The first turn whose dice ``GameState.played`` must hold (the postal game: the
        start of the current set of six)."""

    def read_orders(
        self,
        settings: RulesetSettings,
        state: GameState,  # the reader's own state (their dice and position) at least
        player: PlayerId,
        orders: Orders,
        turns: int,
    ) -> OrderReading:
        """Check one order set for the open round, against the player's stored dice."""

    def default_orders(
        self, settings: RulesetSettings, state: GameState, player: PlayerId, turns: int
    ) -> Orders:
        """What the referee plays for a player who sent nothing."""

    def adjudicate(
        self, settings: RulesetSettings, state: GameState, orders: Mapping[PlayerId, Orders]
    ) -> Adjudication:
        """Play the next round; a player missing from ``orders`` sent none."""

    def player_view(
        self, settings: RulesetSettings, state: GameState, player: PlayerId
    ) -> Mapping[str, Any]:
        """What ``player`` may be told about their own play, for the round report and the
        status reply (positions are everyone's and added by the application)."""

    def referee_view(self, adjudication: Adjudication) -> Mapping[str, Any]:
        """The ruleset's part of the referee's round summary."""

    def public_table(
        self, settings: RulesetSettings, state: GameState
    ) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]] | None:
        """What anyone may see of the game besides positions, as a table (header, rows) for
        its web page: the classic game's counts (C10); None when there is nothing (the
        postal game: R19)."""

    def history(self, rounds: Sequence[StoredRound]) -> tuple[str, ...]:
        """The whole game for the post-game reveal, from what was stored, one line each
        (a heading first)."""

    def career(self, games: Sequence[FinishedGame]) -> Mapping[str, Any]:
        """A player's record across the finished games of this ruleset on the server, for
        the status reply and the game-over mail (the classic game's statistics; the
        postal game keeps none)."""

    def board_notes(self, board: Board) -> tuple[str, ...]:
        """What a referee checking a board (``snl-pbem board``) should know of it under
        this ruleset, one line each."""


DEFAULT_RULESET = "postal"
"""A game's ruleset when its config names none (and the help for mail naming no game)."""

_RULESETS: dict[str, Ruleset] = {}


def register(ruleset: Ruleset) -> Ruleset:
    """Make a ruleset available to games by its name (a test may add its own)."""
    _RULESETS[ruleset.name] = ruleset
    return ruleset


def ruleset_names() -> tuple[str, ...]:
    return tuple(sorted(_RULESETS))


def get_ruleset(name: str) -> Ruleset:
    """The ruleset called ``name``; GameSetupError naming the known ones otherwise."""
    try:
        return _RULESETS[name]
    except KeyError:
        known = ", ".join(f'"{n}"' for n in ruleset_names())
        raise GameSetupError(f"ruleset: no ruleset {name!r} (choose one of {known})") from None
