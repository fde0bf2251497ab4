"""What each channel of the data is, read from the trajectory file's ``channel_names``.

A trajectory file names the kinds of cell its views hold (``channel_names``, one per channel,
docs/trajectory-format.md), and the world model takes every kind from there: the figures per kind,
the items, the masks by name and the report's order all follow the file, so a game with another
kind of cell needs no edit here.

Three names are the frame of the world rather than things in it, and every game built on
`rpg_env.game.constants` has them (its vocabulary refuses a table without them): ``empty`` (the
floor), ``wall`` and ``agent``. Every other channel is an *item*: a kind that appears in the world
and is taken (gem, bone and food in the reference game). The file records names only, not which
kinds are picked up, so a new kind that merely blocks, as a wall does, would count as an item.
"""

from __future__ import annotations

from collections.abc import Sequence

EMPTY_NAME, WALL_NAME, AGENT_NAME = "empty", "wall", "agent"
#: The kinds every game has: the floor, the walls, the players.
FRAME_KINDS = (EMPTY_NAME, WALL_NAME, AGENT_NAME)


def entity_names(channel_names: Sequence[str]) -> tuple[str, ...]:
    """The classes reported with precision / recall / F1: every channel but ``empty``, in channel order."""
    return tuple(n for n in channel_names if n != EMPTY_NAME)


def item_names(channel_names: Sequence[str]) -> tuple[str, ...]:
    """The items among the channels (``f1_items`` averages their F1), in channel order."""
    return tuple(n for n in channel_names if n not in FRAME_KINDS)


def items_first(channel_names: Sequence[str]) -> tuple[str, ...]:
    """`entity_names` as tables and plots show them: the items, then the frame's walls and agents,
    each part in channel order (``gem, bone, food, wall, agent`` in the reference game)."""
    items = item_names(channel_names)
    return items + tuple(n for n in entity_names(channel_names) if n not in items)


def maskable_kinds(channel_names: Sequence[str]) -> tuple[str, ...]:
    """Channels a whole-channel input mask may hide, in `items_first` order: the items and the
    walls. The floor and the agents are not masked, as in the reference's probes."""
    return tuple(n for n in items_first(channel_names) if n != AGENT_NAME)
