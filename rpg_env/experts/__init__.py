"""Stable-Baselines3 experts for Treasurehunt-v0: train, evaluate, profile, watch, and shipped models.

``python -m rpg_env.experts train|evaluate|profile|watch`` (see docs/experts.md): `config` (the
typed training config), `train`, `evaluate` (also the profile), `watch`, `sb3_vec` (a Gymnasium
VectorEnv as an SB3 VecEnv) and ``__main__``; `features` is a path saved files name. The library side
lives in `rpg_env.policies.sb3` (`SB3Policy`, a trained model as a batched co-player or recording
policy; `load_expert`, safe loading); here: `pretrained_path`, the experts that ship with the package.
"""

from __future__ import annotations

from pathlib import Path

PRETRAINED_DIR = Path(__file__).resolve().parent / "pretrained"
#: Shipped experts: name -> folder under pretrained/ (each holds model.zip, config.yaml,
#: provenance.json with the seed and training command, and eval.json).
PRETRAINED = ("dqn", "ppo")


def pretrained_path(name: str = "dqn") -> Path:
    """Path of a shipped expert's ``model.zip`` (``"dqn"``: the main expert; ``"ppo"``: the
    behaviourally different one for the transfer experiment)."""
    if name not in PRETRAINED:
        raise ValueError(f"unknown pretrained expert {name!r}; shipped: {', '.join(PRETRAINED)}")
    path = PRETRAINED_DIR / name / "model.zip"
    if not path.is_file():
        raise FileNotFoundError(f"pretrained expert {name!r} is missing at {path}; reinstall the "
                                f"package or train one with `python -m rpg_env.experts train --algo {name}`")
    return path


__all__ = ["PRETRAINED", "PRETRAINED_DIR", "pretrained_path"]
