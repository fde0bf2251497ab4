"""Typed configs: dataclass <-> YAML <-> ``key=value`` overrides, with one set of rules.

Every field is declared once, typed, with its default and a one-line help::

    @dataclass
    class RunConfig:
        seed: int = setting(0, "seed of everything")
        lr: float = setting(2e-3, "peak learning rate", aliases=("learning_rate",))
        train: TrainConfig = section(TrainConfig, "optimisation")  # a nested dataclass
        env: dict[str, Any] = dict_section("env keyword argument", lambda root: env_defaults())

    cfg = load(RunConfig, "run.yaml", ["train.batch_size=32", "seed=1"])

Field types: int, float, bool, str, ``list[T]`` / ``tuple[T, ...]`` / ``tuple[A, B]`` of
those, unions of them (``int | None``) and `Any`. A dict section takes the keys its callback
returns for the config at hand (whose ordinary fields are set), typed like their defaults.
Checks are strict: ints stand for floats, integral floats (``2e5``) for ints, and a number
YAML 1.1 leaves as a string (``3e-4``) is read as one; nothing else is converted. Override
keys are ``section.key``, a top-level key, an alias, or a bare key naming exactly one setting.
A renamed key keeps its old name working (``setting(..., formerly=("old_name",))``): files,
records and overrides that still use it set the key, with a one-line note. A removed key is listed
in the class's ``REMOVED_SETTINGS`` (name -> ``Removed(value, why)``): a file, record or override
naming it with the value the code now always runs with is read as if it did not, any other value
is refused in one line.
Every mistake raises `ConfigError` saying what to change ("did you mean" for unknown keys);
an override that names nothing is refused.
"""
