"""Features extractors of the SB3 experts: `GridCNN` for one-hot grids and small images, `GridMLP`
for vectors (or anything read flat).

SB3's `NatureCNN` assumes Atari frames (8x8 stride-4 kernels need at least 36x36 pixels) and
fails on a 9x9 view. The view here is tiny and every cell matters, so the CNN keeps full
resolution (3x3 kernels, padding 1, no stride): each output cell sees its 5x5 neighbourhood
after two layers, and the linear head reads off where things are relative to the centre
(the agent). The MLP variant flattens the observation directly into one hidden layer;
``flatten`` is SB3's own `FlattenExtractor` (its MlpPolicy's input, the observation as it is), for
configs copied from RL Baselines3 Zoo.

Both read what SB3's policy hands them: one-hot grids and vectors as they are, byte images
(uint8 in 0..255) already scaled to [0, 1] by SB3's ``normalize_images``, which
`rpg_env.policies.sb3.policy_kwargs_from_net` sets for exactly those; images are channels first
by then (`rpg_env.policies.sb3.network_frame_space`). Images of 36 pixels a side or more go
through SB3's own NatureCNN instead of `GridCNN` (`rpg_env.policies.sb3.NATURE_CNN_SIDE`).
"""

from __future__ import annotations

import gymnasium as gym
import torch
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, FlattenExtractor
from torch import nn


class GridCNN(BaseFeaturesExtractor):
    """``(B, C, H, W)`` float stack (a one-hot grid ``(C, V, V)``, or an image scaled to [0, 1])
    -> ``(B, features_dim)`` features.

    :param observation_space: channel-first Box ``(C, H, W)`` (e.g. C = 6 cell kinds x frames).
    :param channels: output channels of each 3x3 convolution (same padding, stride 1).
    :param features_dim: width of the linear layer after flattening.
    """

    def __init__(self, observation_space: gym.spaces.Box, channels: tuple[int, ...] = (32, 16),
                 features_dim: int = 64) -> None:
        super().__init__(observation_space, features_dim)
        if len(observation_space.shape) != 3:
            raise ValueError(f"GridCNN needs a (C, V, V) observation space, got shape "
                             f"{observation_space.shape}")
        in_ch, height, width = observation_space.shape
        layers: list[nn.Module] = []
        for out_ch in channels:
            layers += [nn.Conv2d(in_ch, out_ch, kernel_size=3, padding=1), nn.ReLU()]
            in_ch = out_ch
        self.cnn = nn.Sequential(*layers, nn.Flatten())
        self.linear = nn.Sequential(nn.Linear(in_ch * height * width, features_dim), nn.ReLU())

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.linear(self.cnn(observations))


class GridMLP(BaseFeaturesExtractor):
    """``(B, *shape)`` (a vector ``(D * k,)``, a grid, an image) -> flatten -> ``(B, features_dim)``
    with one hidden ReLU layer."""

    def __init__(self, observation_space: gym.spaces.Box, features_dim: int = 128) -> None:
        super().__init__(observation_space, features_dim)
        n_in = int(torch.tensor(observation_space.shape).prod())
        self.mlp = nn.Sequential(nn.Flatten(), nn.Linear(n_in, features_dim), nn.ReLU())

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.mlp(observations)


#: The extractor of each ``net.extractor`` name (`rpg_env.experts.config.EXTRACTORS`, after ``auto``
#: is resolved); loading a model resolves the class by name, never by unpickling it.
EXTRACTOR_CLASSES: dict[str, type[BaseFeaturesExtractor]] = {"cnn": GridCNN, "mlp": GridMLP,
                                                              "flatten": FlattenExtractor}
