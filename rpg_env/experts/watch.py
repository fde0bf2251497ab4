"""Watch an expert play: a pygame window, or a GIF/MP4 written with `rpg_env.render.save_animation`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import rpg_env
from rpg_env.experts.policy import SB3Policy


def watch(model: str | Path, out: str | Path | None = None, seed: int = 0, episodes: int = 1,
          fps: int = 8, env_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Play ``episodes`` seeded episodes with the expert; returns ``{"returns": [...], "frames": n}``.

    Without ``out`` the game is shown in a pygame window (``render_mode="human"``); with ``out``
    (``.gif`` or ``.mp4``) the whole-map RGB frames are written there instead.
    """
    policy = SB3Policy.load(model)
    kwargs = dict(policy.model.rpg_expert.get("env", {}))
    kwargs.update(env_kwargs or {})
    if out is not None:  # refuse a bad path before playing, not after
        from rpg_env.render import VIDEO_SUFFIXES

        if Path(out).suffix.lower() not in VIDEO_SUFFIXES:
            raise ValueError(f"--out must end in {' or '.join(VIDEO_SUFFIXES)}, got {str(out)!r}")
    env = gym.make(rpg_env.ENV_ID, render_mode="rgb_array" if out is not None else "human", **kwargs)
    policy.check_view_shape(env.observation_space.shape)
    if out is None:
        # A copy: the class-level metadata dict is shared by every env instance.
        env.unwrapped.metadata = {**env.unwrapped.metadata, "render_fps": fps}
    frames: list[np.ndarray] = []
    returns = []
    try:
        for episode in range(episodes):
            obs, info = env.reset(seed=seed + episode)
            policy.seed(np.random.default_rng(seed + episode))
            start = np.ones(1, dtype=bool)
            if out is not None:
                frames.append(env.render())
            done = False
            while not done:
                action = policy.act(obs[None], start)[0]
                start[:] = False
                obs, _, terminated, truncated, info = env.step(action)
                done = terminated or truncated
                if out is not None:
                    frames.append(env.render())
            returns.append(float(info["episode_return"]))
    finally:
        env.close()
    if out is not None:
        from rpg_env.render import save_animation

        Path(out).parent.mkdir(parents=True, exist_ok=True)
        save_animation(frames, out, fps)
    return {"returns": returns, "frames": len(frames)}
