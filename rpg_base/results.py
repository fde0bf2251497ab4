"""How a measurement leaves the process: a JSON record and, beside it, its PNG plot.

Every benchmark and report ends the same way; writing the record whole (a reader or a resumed run
never sees half a file) and as strict JSON (``NaN`` is not JSON: an unmeasured figure is ``null``)
is done once, here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rpg_base.errors import InputError
from rpg_base.provenance import json_ready, write_whole


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend, imported on the first plot (printing tables
    needs no matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | Path, dpi: int = 110) -> Path:
    """Write ``fig`` to ``path`` (PNG), close it and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path


def finite_or_none(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by ``None`` (JSON's "not measured")."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite_or_none(v) for v in value]
    return value


def write_results(out: str | Path, record: dict[str, Any], plot: Callable[[Path], Any] | None = None,
                  indent: int = 1) -> list[Path]:
    """Write ``record`` to ``out`` as strict JSON, whole or not at all, then ``plot(png)`` with the
    PNG path beside it (``out`` with the suffix ``.png``) if given; print and return what was written."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(finite_or_none(json_ready(record)), indent=indent, allow_nan=False) + "\n"
    write_whole(out, text)
    written = [out]
    if plot is not None:
        png = out.with_suffix(".png")
        plot(png)
        written.append(png)
    print("wrote " + " and ".join(str(p) for p in written))
    return written


def read_json_input(path: Path, subject: str, fix: str) -> Any:
    """The JSON in file ``path``, a file a user named; an `InputError` "``subject`` is empty / not valid
    JSON ...; ``fix``" where it cannot be read as JSON (a raw OS or decoder error would not say which
    option is wrong)."""
    try:
        text = path.read_text()
    except OSError as err:
        raise InputError(f"{subject} cannot be read ({err.strerror or err}); {fix}") from None
    except UnicodeDecodeError:
        raise InputError(f"{subject} is not valid JSON (not UTF-8 text); {fix}") from None
    if not text.strip():
        raise InputError(f"{subject} is empty; {fix}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{subject} is not valid JSON ({err}); {fix}") from None


def earlier_result(path: Path, script: str, keys: frozenset[str]) -> dict[str, Any]:
    """The record of an earlier result of ``script`` given to ``--merge``, whose ``runs`` (a list of
    dicts each holding ``keys``) join a new run's summary; an `InputError` where the file is not one
    (not JSON, empty, or JSON without such a list of runs)."""
    fix = "give a JSON file this script wrote (its --out)"
    record = read_json_input(path, f"--merge {path}", fix)
    runs = record.get("runs") if isinstance(record, dict) else None
    if not isinstance(runs, list) or not all(isinstance(r, dict) and keys <= r.keys() for r in runs):
        raise InputError(f"--merge {path} is not a result of {script} (no list of runs, each with "
                         f"{', '.join(sorted(keys))}); {fix}")
    return record
