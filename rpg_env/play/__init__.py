"""Play by keyboard: ``python -m rpg_env.play`` (`__main__`), and the loop itself (`loop`), which
works with any env that renders RGB frames and can switch between two of them."""

from rpg_env.play.loop import DEFAULT_FPS, PlaySummary, describe_step, key_actions, play

__all__ = ["DEFAULT_FPS", "PlaySummary", "describe_step", "key_actions", "main", "play"]


def main(argv=None):
    """``python -m rpg_env.play`` (see `rpg_env.play.__main__`)."""
    from rpg_env.play.__main__ import main as cli_main

    return cli_main(argv)
