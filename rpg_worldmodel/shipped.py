"""What ships with the package, ready to use without a training run: a small world model trained
on the shipped DQN expert's games (with its provenance and held-out evaluation beside it), and the
best agent trained entirely inside it.

    pretrained_path()          the world model's checkpoint folder
    pretrained_path("dream")   the dream agent's model.zip (an SB3 expert)
    pretrained_path("scratch")             the agent learned from scratch (`rpg_worldmodel.learn`)
    pretrained_path("scratch_worldmodel")  the world model it learned beside it (a checkpoint folder)

Wherever a checkpoint is accepted (evaluate, the imagined env, play, dream, imitate),
``"pretrained"`` names the shipped world model. Rebuild it with ``python -m rpg_worldmodel.ship``.
"""

from __future__ import annotations

from pathlib import Path

PRETRAINED_DIR = Path(__file__).resolve().parent / "pretrained"
#: The name that stands for the shipped world model wherever a checkpoint path is accepted.
PRETRAINED_NAME = "pretrained"
#: Shipped artefacts: name -> (folder under pretrained/, the file or folder returned).
SHIPPED = {"worldmodel": ("worldmodel", "checkpoint"), "dream": ("dream", "model.zip"),
           "scratch": ("scratch", "model.zip"), "scratch_worldmodel": ("scratch", "checkpoint")}


def pretrained_path(name: str = "worldmodel") -> Path:
    """The shipped world model's checkpoint folder (``"worldmodel"``), the dream agent's
    ``model.zip`` (``"dream"``), the agent learned from scratch (``"scratch"``) or its world model
    (``"scratch_worldmodel"``)."""
    if name not in SHIPPED:
        raise ValueError(f"unknown pretrained artefact {name!r}; shipped: {', '.join(SHIPPED)}")
    folder, leaf = SHIPPED[name]
    path = PRETRAINED_DIR / folder / leaf
    if not path.exists():
        raise FileNotFoundError(f"the shipped {name} is missing at {path}; reinstall the package or "
                                f"rebuild it with `python -m rpg_worldmodel.ship`")
    return path
