"""The postal ruleset (RULES.md R1-R19): chosen dice, trapdoors, the round, the player view."""
