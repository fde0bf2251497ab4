"""Play by keyboard: ``python -m rpg_env.play`` (`__main__`), and the loop itself (`loop`), which
works with any env that renders RGB frames and can switch between two of them."""
