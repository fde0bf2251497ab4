"""Watch an expert play: a pygame window, or a GIF/MP4 written with `rpg_env.render.save_animation`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rpg_base.errors import InputError
from rpg_env.envs.any_env import make_wrapped_env
from rpg_env.experts.evaluate import trained_env, trained_wrappers
from rpg_env.policies.registry import load_expert_policy
from rpg_env.render import VIDEO_SUFFIXES, save_animation
from rpg_env.rollout import rollout


def watch(model: str | Path, out: str | Path | None = None, seed: int = 0, episodes: int = 1,
          fps: int = 8, env_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Play ``episodes`` seeded episodes with the expert; returns ``{"returns": [...], "frames": n}``.

    Without ``out`` the game is shown in a pygame window (``render_mode="human"``); with ``out``
    (``.gif`` or ``.mp4``) the whole-map RGB frames are written there instead.
    """
    policy = load_expert_policy(model)
    env_id, kwargs = trained_env(policy)
    kwargs.update(env_kwargs or {})
    if out is not None:  # refuse a bad path before playing, not after
        if Path(out).suffix.lower() not in VIDEO_SUFFIXES:
            raise InputError(f"--out must end in {' or '.join(VIDEO_SUFFIXES)}, got {str(out)!r}")
    env = make_wrapped_env(env_id, kwargs, trained_wrappers(policy),
                   render_mode="rgb_array" if out is not None else "human")
    policy.check_view_shape(env.observation_space.shape)
    if out is None:
        env.unwrapped.metadata["render_fps"] = fps  # the env's own copy of its metadata
    frames: list[np.ndarray] = []
    returns = []

    def snap(*_args) -> None:
        if out is not None:
            frames.append(env.render())

    try:
        for episode in range(episodes):
            rng = np.random.default_rng(seed + episode)
            result = rollout(env, policy, seed=seed + episode, policy_rng=rng, on_reset=snap, on_step=snap)
            returns.append(float(result.returns[0]))
    finally:
        env.close()
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        save_animation(frames, out, fps)
    return {"returns": returns, "frames": len(frames)}
