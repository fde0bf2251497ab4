"""rpg_base: what `rpg_env` and `rpg_worldmodel` share, and nothing of either.

- `errors`: `InputError`, the one error type for bad input;
- `cli`: `run_command`, the entry point of every command line (bad input -> one ``error:`` line,
  exit 2) and its `ArgumentParser`;
- `provenance`: seeds, package versions and the git revision recorded with every artifact, with
  paths and commands made portable (no machine's folders in a shipped record);
- `progress`: progress bars on a terminal, a plain line every few seconds in a log;
- `typed_config`: typed dataclass <-> YAML <-> ``key=value`` configs (`typed_config.config`,
  checked by `typed_config.values`).
"""
