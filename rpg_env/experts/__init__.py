"""Experts for Treasurehunt-v0: train, evaluate, profile, watch, and shipped models.

``python -m rpg_env.experts train|evaluate|profile|watch`` (see docs/experts.md): `config` (the
typed training config), `train` (SB3's DQN, PPO and sb3-contrib's RecurrentPPO), `trxl_ppo` (PPO
over a TransformerXL memory, seed 002), `evaluate` (also the profile), `watch`, `sb3_vec` (a
Gymnasium VectorEnv as an SB3 VecEnv) and ``__main__``; `features` is a path saved files name. The
library side lives in `rpg_env.policies.sb3` (`SB3Policy`, a trained model as a batched co-player or recording
policy; `load_expert`, safe loading); here: `pretrained_path`, the experts that ship with the package.
"""

from __future__ import annotations

from pathlib import Path

PRETRAINED_DIR = Path(__file__).resolve().parent / "pretrained"
#: Shipped experts: name -> folder under pretrained/ (each holds model.zip, config.yaml,
#: provenance.json with the seed and training command, and eval.json). The SB3 experts, which
#: act on a stack of frames (the world model's theory-of-mind ceiling replays them):
PRETRAINED = ("dqn", "ppo")
#: ... and the experts that remember (TrXL-PPO, trained in the memory variant `item_visible_turns`).
MEMORY_PRETRAINED = ("trxl",)


def pretrained_path(name: str = "dqn") -> Path:
    """Path of a shipped expert's ``model.zip`` (``"dqn"``: the main expert; ``"ppo"``: the
    behaviourally different one for the transfer experiment; ``"trxl"``: the TrXL-PPO memory
    expert of the memory variant, ``item_visible_turns=2``)."""
    if name not in PRETRAINED + MEMORY_PRETRAINED:
        shipped = ", ".join(PRETRAINED + MEMORY_PRETRAINED)
        raise ValueError(f"unknown pretrained expert {name!r}; shipped: {shipped}")
    path = PRETRAINED_DIR / name / "model.zip"
    if not path.is_file():
        algo = "trxl-ppo env.item_visible_turns=2" if name == "trxl" else name
        raise FileNotFoundError(f"pretrained expert {name!r} is missing at {path}; reinstall the "
                                f"package or train one with `python -m rpg_env.experts train --algo {algo}`")
    return path


__all__ = ["MEMORY_PRETRAINED", "PRETRAINED", "PRETRAINED_DIR", "pretrained_path"]
