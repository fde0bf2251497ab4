import os

# pygame runs headless in tests.
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
# Two xdist workers, and the processes they start (torchrun ranks, the notebook's kernel), share
# two cores: with torch's default of one OpenMP thread per core each, their spinning threads
# oversubscribe the cores several times over (measured: the suite ran 4x slower).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

#: A world model small enough to train in a few seconds (tests check behaviour, not quality).
TINY_WORLD_MODEL = ["model.width=24", "model.num_heads=2", "model.num_layers=1", "model.num_frames=3",
                    "train.max_steps=20", "train.warmup_steps=2", "train.batch_size=16",
                    "train.eval_every=20", "train.checkpoint_every=20", "train.progress=false",
                    "data.max_val_windows=64"]


@pytest.fixture(scope="session")
def tiny_world_model(tmp_path_factory):
    """``(run folder, trajectory file)``: a tiny world model with a reward head, trained on 30
    greedy games."""
    from rpg_env.record import record
    from rpg_worldmodel.config import load_world_model_config
    from rpg_worldmodel.train import train

    root = tmp_path_factory.mktemp("tiny_world_model")
    data = root / "greedy.h5"
    record("greedy", data, 30, seed=0, num_envs=10, mode="w", progress=False)
    cfg = load_world_model_config(None, TINY_WORLD_MODEL)
    cfg.data.path, cfg.out_dir = str(data), str(root / "run")
    train(cfg)
    return root / "run", data


@pytest.fixture(autouse=True)
def torch_threads_are_left_alone():
    """Fail a test after which torch's thread count changed (restoring it for the next test).

    The count changes the order of floating-point reductions: a command run in-process after one
    that leaked a setting gave other figures than the same command in its own process."""
    import sys

    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    yield
    torch = sys.modules.get("torch")
    if torch is None:
        return
    after = torch.get_num_threads()
    if before is None:
        before = int(os.environ["OMP_NUM_THREADS"])
    if after != before:
        torch.set_num_threads(before)
        pytest.fail(f"the test left torch on {after} threads (was {before}): library code and "
                    f"commands must restore the caller's setting (rpg_base.provenance.pinned_torch_threads)")
