"""Environments with Treasurehunt-v0's spaces: the real game (`treasurehunt`, N = 1; `vector`,
N worlds) and the protocol every such env follows (`protocol`). Nothing is imported here, so
the protocol can be read without loading the game."""
