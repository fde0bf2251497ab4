"""Seeds and versions recorded with every artifact (run folders, trajectory files, checkpoints).

Game-free: safe to import from `rpg_worldmodel` without pulling in the environment.
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

#: The source tree (the folder holding rpg_env/ and rpg_worldmodel/): paths under it are recorded
#: relative to it, so a record made on one machine reads the same on another.
SOURCE_ROOT = Path(__file__).resolve().parent.parent

TRACKED_PACKAGES = ("rpg-treasurehunt", "numpy", "gymnasium", "stable-baselines3", "sb3-contrib", "torch",
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


def portable_path(path: str | os.PathLike, base: str | os.PathLike | None = None) -> str:
    """``path`` as a record may keep it without naming this machine's folders: relative to
    ``base`` (e.g. the run folder) when under it, else to the source tree, else to the working
    folder; an absolute path elsewhere keeps only its file name (records pair it with a
    fingerprint where the file matters). A relative path is kept as given."""
    path = Path(path)
    if not path.is_absolute():
        return path.as_posix()
    resolved = path.resolve()
    for root in (base, SOURCE_ROOT, Path.cwd()):
        if root is not None and resolved.is_relative_to(Path(root).resolve()):
            return resolved.relative_to(Path(root).resolve()).as_posix()
    return path.name


def portable_command(argv: list[str], base: str | os.PathLike | None = None) -> str:
    """A command line with every absolute path in it made `portable_path` (``--out=/a/b`` too)."""
    words = []
    for word in argv:
        key, eq, value = word.partition("=")
        if eq and os.path.isabs(value):
            words.append(f"{key}={portable_path(value, base)}")
        else:
            words.append(portable_path(word, base) if os.path.isabs(word) else word)
    return shlex.join(words)


def cpu_description() -> dict[str, Any]:
    """The processor a record was made on: its name, family and model (from ``/proc/cpuinfo`` on
    Linux, else `platform.processor`), the cores the process may use and, where torch is already
    imported, the vector instructions its kernels dispatch to (``"AVX512"``, ``"AVX2"``...).

    Timings depend on the processor, and so do results beyond their seed: torch picks its
    floating-point kernels by the CPU's instruction set, and an RL run amplifies the last bit in
    which they differ, so the same seed is the same result on the same kind of processor."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    fields = {"name": platform.processor() or platform.machine(), **first_processor(cpuinfo)}
    fields["cores"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch = sys.modules.get("torch")
    if torch is not None:
        fields["torch_capability"] = torch.backends.cpu.get_cpu_capability()
    return fields


def device_description(device: str) -> str:
    """The hardware behind a torch ``device`` name, for a record of where a figure was measured: the
    GPU's name for ``cuda``/``cuda:N`` (torch is imported then), else ``"cpu"``."""
    if not device.startswith("cuda"):
        return "cpu"
    import torch

    return torch.cuda.get_device_name(torch.device(device))


def first_processor(cpuinfo: str) -> dict[str, str]:
    """``name``, ``family`` and ``model`` of the first processor in a ``/proc/cpuinfo`` text (the
    fields it has; none of an empty text)."""
    wanted = {"model name": "name", "cpu family": "family", "model": "model"}
    fields = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            break  # the first processor's block ends at its first blank line
        if key.strip() in wanted:
            fields[wanted[key.strip()]] = value.strip()
    return fields


def provenance(seed: int | None = None, **extra) -> dict:
    """A JSON-ready record of how an artifact was made (its command with `portable_command`'s
    paths, so no record names this machine's folders)."""
    record = {
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "seed": seed,
        "command": portable_command([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "platform": platform.platform(),
        "cpu": cpu_description(),
        "versions": package_versions(),
        "git_revision": git_revision(),
    }
    record.update(extra)
    return record


@contextmanager
def pinned_torch_threads(num_threads: int | None, *, import_torch: bool = True) -> Iterator[None]:
    """Run the block with torch's intra-op thread count set to ``num_threads``, then restore the
    caller's setting.

    The thread count changes the order of floating-point reductions, so it is part of what
    makes a result reproducible; library code must not leave it changed behind the caller's
    back. ``None`` leaves torch alone; with ``import_torch=False`` nothing happens unless torch
    is already imported (for callers whose policies may not use torch at all).
    """
    torch = sys.modules.get("torch")
    if num_threads is None or (torch is None and not import_torch):
        yield
        return
    if torch is None:
        import torch
    before = torch.get_num_threads()
    torch.set_num_threads(int(num_threads))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def write_whole(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: a hidden temporary file beside it, renamed over
    it, so a crash or a kill leaves the old file or the new one (records a resume or a reader trusts)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def json_ready(value: Any) -> Any:
    """``value`` as JSON can hold it: dict keys as text, tuples as lists, NumPy arrays and scalars as
    lists and numbers, paths as text (records of runs, checkpoints and trajectory files alike)."""
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    return value
