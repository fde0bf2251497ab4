"""Training under torchrun (DistributedDataParallel, 2 CPU processes with gloo): the same losses
and weights as one process, exact resume, one writer, clear errors; and the CUDA choices (device,
autocast dtype, backend, pinned copies), checked on CPU."""

import csv
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from rpg_base.typed_config.values import ConfigError
from rpg_env.record import record
from rpg_worldmodel import distributed as D
from rpg_worldmodel import train as T
from rpg_worldmodel.checkpoint import load_checkpoint
from rpg_worldmodel.config import load_world_model_config
from rpg_worldmodel.models.world_model import WorldModel
from rpg_worldmodel.resume import Resume, restore_training

# Cells are masked at random and the cell refiner (on by default) draws which next views it learns
# from and which of their cells it is shown: the ways a rank's slice could differ from its share of
# the global batch (masks drawn per batch, a loss over views drawn from the batch).
TINY = ["model.width=24", "model.num_heads=2", "model.num_layers=1", "model.num_frames=3",
        "train.batch_size=8", "train.warmup_steps=2", "train.log_every=1",
        "train.eval_every=3",
        "train.checkpoint_every=3", "train.progress=false", "data.max_val_windows=64", "train.num_threads=1",
        "train.max_steps=6", "train.train_mask=random_cells",
        "train.keep_last_checkpoints=0"]


def _torchrun(*args: str) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "rpg_worldmodel.train", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


LOSSES = ("loss", "view_ce", "action_ce", "reward_ce", "refiner_ce")


def _losses(run_dir):
    """``(step, split, the total loss and each component)`` of every row of metrics.csv."""
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return [(int(r["step"]), r["split"], *(float(r[k]) for k in LOSSES)) for r in rows]


def _weights(run_dir, step):
    return torch.load(run_dir / "checkpoints" / f"step_{step:08d}" / "model.pt", weights_only=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A one-process run and 2-process runs: whole, and stopped at step 3 then resumed."""
    root = tmp_path_factory.mktemp("ddp")
    data = root / "greedy.h5"
    record("greedy", data, 12, seed=0, num_envs=6, mode="w", progress=False, env_kwargs={"max_turns": 30})
    T.train(load_world_model_config(None, [*TINY, f"data.path={data}", f"out_dir={root / 'one'}"]))
    (root / "two").mkdir()  # an existing, empty run folder is fine for every rank
    _torchrun("--data", str(data), "--out", str(root / "two"), *TINY)
    _torchrun("--data", str(data), "--out", str(root / "cut"), *TINY, "--stop-at", "3")
    _torchrun("--resume", str(root / "cut"))
    return root


@pytest.mark.slow
def test_two_processes_train_as_one(runs):
    one, two = _losses(runs / "one"), _losses(runs / "two")
    # 6 steps, 2 evaluations, and the refiner stage's evaluation (the first process runs the stage)
    assert [r[:2] for r in one] == [r[:2] for r in two] and len(one) == 6 + 2 + 1
    for a, b in zip(one, two, strict=True):  # per-step losses of the global batch, refiner's included
        assert a[2:] == pytest.approx(b[2:], rel=1e-5), (a, b)
    assert all(r[-1] > 0 for r in one)  # the refiner was trained and scored
    a, b = _weights(runs / "one", 6), _weights(runs / "two", 6)
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=2e-5)
    # Only rank 0 writes: one tensorboard file, one provenance, the world size recorded.
    assert len(list((runs / "two" / "tb").glob("events.*"))) == 1
    summary = (runs / "two" / "summary.json").read_text()
    assert '"world_size": 2' in summary and '"streamed": false' in summary


@pytest.mark.slow
def test_two_processes_train_the_default_model_as_one(runs, tmp_path):
    """The default model (its width, layers, window, motion head, memory map and cell refiner), not
    the tiny one: every loss of every step, the refiner's included, equal to 1e-5."""
    settings = ["train.batch_size=8", "train.warmup_steps=2", "train.log_every=1", "train.eval_every=4",
                "train.checkpoint_every=4", "train.progress=false", "data.max_val_windows=64",
                "train.num_threads=1", "train.max_steps=4", "train.keep_last_checkpoints=0"]
    data = runs / "greedy.h5"
    T.train(load_world_model_config(None, [*settings, f"data.path={data}", f"out_dir={tmp_path / 'one'}"]))
    _torchrun("--data", str(data), "--out", str(tmp_path / "two"), *settings)
    one, two = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert [r[:2] for r in one] == [r[:2] for r in two] and len(one) == 4 + 1 + 1  # the refiner stage's
    for a, b in zip(one, two, strict=True):
        assert a[2:] == pytest.approx(b[2:], rel=1e-5), (a, b)
    assert all(r[-1] > 0 for r in one)  # the refiner was trained and scored


def test_a_resumed_two_process_run_matches_the_uninterrupted_one(runs):
    assert _losses(runs / "cut") == _losses(runs / "two")
    a, b = _weights(runs / "two", 6), _weights(runs / "cut", 6)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-6, atol=1e-7)


def test_every_rank_resumes_its_own_random_stream(runs):
    """Dropout draws from each rank's own stream (seeded apart): the checkpoint holds all of them
    and a resumed rank takes its own, and every rank the refiner's shared generator."""
    folder = runs / "cut" / "checkpoints" / "step_00000003"
    state = torch.load(folder / "training.pt", weights_only=True)
    ranks = state["rank_rng"]
    assert len(ranks) == 2 and not torch.equal(ranks[0]["torch"], ranks[1]["torch"])
    assert torch.equal(ranks[0]["torch"], state["torch_rng"])
    ck = load_checkpoint(folder)
    model = WorldModel(ck.config.model)
    optimizer = torch.optim.AdamW(model.param_groups(0.05))
    scaler = torch.amp.GradScaler("cuda", enabled=False)
    resume = Resume(folder, ck.record, {k: np.asarray(v) for k, v in ck.record.splits.items()}, state)
    for rank in (1, None):
        draws = torch.Generator()
        restore_training(resume, model, optimizer, scaler, torch.device("cpu"), rank, draws)
        assert torch.equal(torch.get_rng_state(), ranks[1]["torch"] if rank else state["torch_rng"])
        assert torch.equal(draws.get_state(), state["draw_rng"])


def test_a_global_batch_the_processes_cannot_share_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(ConfigError, match=r"train.batch_size=8 is the global batch .* 3 processes"):
        T.main(["--data", str(tmp_path / "unread.h5"), "--out", str(tmp_path / "run"), *TINY])
    assert not (tmp_path / "run").exists()


def _disagree(rank: int, port: int, out: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    procs = D.Processes.from_env("cpu")
    with D.process_group(procs):
        try:
            procs.same_everywhere(f"fingerprint-{rank}", "the training data", shown=f"shard{rank}.h5")
            message = "no error"
        except D.RankMismatchError as err:
            message = str(err)
    with open(os.path.join(out, f"rank{rank}.txt"), "w") as f:
        f.write(message)


def test_processes_that_disagree_on_the_data_name_both_sides(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_disagree, args=(port, str(tmp_path)), nprocs=2, join=True, start_method="spawn")
    for rank in (0, 1):
        message = (tmp_path / f"rank{rank}.txt").read_text()
        assert message == ("the processes disagree on the training data: rank 0 has shard0.h5, rank 1 has "
                           "shard1.h5; give every process the same")


def test_without_torchrun_there_is_one_process_and_no_group(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    procs = D.Processes.from_env("cpu")
    assert (procs.rank, procs.world_size, procs.launched, procs.master) == (0, 1, False, True)
    assert procs.gather("x") == ["x"] and procs.broadcast(3) == 3
    assert procs.mean({"loss": 2.0}) == {"loss": 2.0}
    launched = D.Processes.from_env("cpu", {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"})
    assert (launched.rank, launched.local_rank, launched.world_size, launched.launched) == (3, 1, 4, True)


# ------------------------------------------------------------------ CUDA paths, checked on CPU
def test_device_selection(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert D.resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ConfigError, match="CUDA is not available"):
        D.resolve_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert D.resolve_device("auto") == torch.device("cuda")
    assert D.resolve_device("cuda:1") == torch.device("cuda", 1)
    # Under torchrun each process takes its own GPU.
    assert D.resolve_device("auto", local_rank=2, launched=True) == torch.device("cuda", 2)
    assert D.resolve_device("cpu", local_rank=2, launched=True) == torch.device("cpu")
    with pytest.raises(ConfigError, match="pins every process to one GPU"):
        D.resolve_device("cuda:0", local_rank=1, launched=True)
    launched = D.Processes.from_env("auto", {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"})
    assert launched.device == torch.device("cuda", 1)


@pytest.mark.parametrize(("bf16", "expected"), [(True, torch.bfloat16), (False, torch.float16)])
def test_autocast_dtype_and_grad_scaler_choice(monkeypatch, bf16, expected):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: bf16)
    cuda = torch.device("cuda", 0)
    assert D.autocast_dtype(cuda, enabled=True) is expected
    assert D.autocast_dtype(cuda, enabled=False) is None
    assert D.autocast_dtype(torch.device("cpu"), enabled=True) is None  # fp32 is faster on CPU
    assert isinstance(D.autocast_context(torch.device("cpu"), True), type(D.autocast_context(cuda, False)))


def test_backend_and_pinned_copies():
    assert D.backend_for(torch.device("cuda", 0)) == "nccl"
    assert D.backend_for(torch.device("cpu")) == "gloo"
    assert D.pinned(torch.device("cuda", 0)) and not D.pinned(torch.device("cpu"))

    class Recorder:
        def to(self, device, non_blocking=False):
            self.call = (device, non_blocking)
            return self

    batch = {"views": Recorder()}
    D.to_device(batch, torch.device("cuda", 0))
    assert batch["views"].call == (torch.device("cuda", 0), True)
    D.to_device(batch, torch.device("cpu"))
    assert batch["views"].call == (torch.device("cpu"), False)


def test_the_loader_pins_memory_for_cuda(tmp_path):
    data = tmp_path / "g.h5"
    record("greedy", data, 4, seed=0, num_envs=4, mode="w", progress=False, env_kwargs={"max_turns": 20})
    cfg = load_world_model_config(None, [*TINY, f"data.path={data}", f"out_dir={tmp_path / 'r'}"])
    run = T.setup(cfg, D.Processes())
    assert not T.batches(run, 2).pin_memory
    cuda = T.Run(**{**run.__dict__, "procs": D.Processes(device=torch.device("cuda", 0))})
    loader = T.batches(cuda, 2)
    assert loader.pin_memory and loader.batch_sampler.world_size == 1
