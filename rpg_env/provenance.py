"""Seeds and versions recorded with every artifact (run folders, trajectory files, checkpoints).

Game-free: safe to import from `rpg_worldmodel` without pulling in the environment.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

TRACKED_PACKAGES = ("rpg-treasurehunt", "numpy", "gymnasium", "stable-baselines3", "torch",
                    "h5py", "pygame-ce", "tensorboard", "minari")


def package_versions(packages: tuple[str, ...] = TRACKED_PACKAGES) -> dict[str, str]:
    """Installed versions of ``packages`` (missing ones are left out), plus Python's."""
    versions = {"python": platform.python_version()}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def git_revision(path: str | Path | None = None) -> str | None:
    """The source tree's commit (with ``-dirty`` when modified), or None outside a checkout."""
    cwd = Path(path or Path(__file__).resolve().parent)
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=cwd,
                             capture_output=True, text=True, timeout=5, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def provenance(seed: int | None = None, **extra) -> dict:
    """A JSON-ready record of how an artifact was made."""
    record = {
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "seed": seed,
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "platform": platform.platform(),
        "versions": package_versions(),
        "git_revision": git_revision(),
    }
    record.update(extra)
    return record
