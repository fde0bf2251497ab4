"""The game itself: its vocabulary (`constants`), its rules over N worlds (`world`) and the
encodings of what an agent sees (`observation`). Imports nothing else of `rpg_env`."""
