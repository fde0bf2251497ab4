"""The tutorial notebook runs top to bottom (executed by nbclient, as a reader's Jupyter would)."""

from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "tutorial.ipynb"


def test_the_tutorial_notebook_runs_top_to_bottom(tmp_path, monkeypatch):
    monkeypatch.setenv("TUTORIAL_DIR", str(tmp_path))
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
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
