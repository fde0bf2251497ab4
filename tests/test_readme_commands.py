"""The README's two set-up commands stay true: CI runs the README's test command verbatim."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Set-up commands", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section, flags=re.S)


def test_readme_has_exactly_two_setup_commands():
    commands = _readme_commands()
    assert len(commands) == 2, commands
    main_job, tests = commands
    assert main_job.endswith("python -m rpg_worldmodel.pipeline")
    assert "pytest" in tests
    for command in commands:  # torch is pinned and installed before anything that depends on it
        assert command.index("torch==2.13.0") < command.index(" -e "), command


def test_ci_runs_the_readme_test_command_verbatim():
    test_command = _readme_commands()[1]
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test_command in ci_lines


def test_the_readme_runs_the_fast_set_and_ci_the_slow_set_after_it():
    test_command = _readme_commands()[1]
    assert test_command.endswith('-m "not slow"'), test_command
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    slow = [i for i, line in enumerate(ci_lines)
            if line.startswith("python -m pytest") and line.endswith("-m slow")]
    assert slow and slow[0] > ci_lines.index(test_command), ci_lines
