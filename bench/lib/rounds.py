"""The order of the units (scenario, connection count, ...) in interleaved rounds.

Every round runs every unit once; the order is rotated from round to round so that each
unit runs early in one round and late in another, and the noise of a shared machine (a
neighbour busy for a while, a cache warmed by the previous unit) hits every unit alike."""

from typing import List, Sequence, TypeVar

Unit = TypeVar("Unit")


def rotated(units: Sequence[Unit], offset: int) -> List[Unit]:
    """The units starting at `offset` (taken modulo their number), wrapping around."""
    if not units:
        return []
    offset %= len(units)
    return list(units[offset:]) + list(units[:offset])


def round_order(units: Sequence[Unit], round_index: int, rounds: int) -> List[Unit]:
    """Every unit once, rotated by an equal share of the units each round: over `rounds`
    rounds the starting point moves through the whole list once."""
    return rotated(units, (round_index * len(units)) // max(rounds, 1))
