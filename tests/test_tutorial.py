"""The tutorial notebook runs top to bottom (executed by nbclient, as a reader's Jupyter would),
and again from the top in the same folder (a reader re-running it must not hit "already holds a
run")."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "tutorial.ipynb"


def _execute(folder: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}})
    client.execute()
    return nb


@pytest.mark.slow
def test_the_tutorial_notebook_runs_top_to_bottom_twice(tmp_path, monkeypatch):
    monkeypatch.setenv("TUTORIAL_DIR", str(tmp_path))
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    _execute(tmp_path)
    nb = _execute(tmp_path)  # the second run, in the same folder, from the top
    assert len(list((tmp_path / "runs").iterdir())) == 2  # each run trained into its own folder
    outputs = {i: "".join(o.get("text", "") for o in cell.get("outputs", []))
               for i, cell in enumerate(nb.cells) if cell.cell_type == "code"}
    text = "\n".join(outputs.values())
    # What each part promises, read off its printed output.
    assert "games" in text and "streams;" in text  # recorded and inspected
    assert "best checkpoint:" in text  # trained, the best kept
    assert "| model |" in text and "| motion_oracle |" in text and "| memory_oracle |" in text  # evaluated
    assert "imagined turn" in text  # stepped the dream
    assert '"real_return"' in text  # an agent trained in the dream, judged in the real game
    images = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert len(images) >= 2  # the file's views and the side-by-side strip
