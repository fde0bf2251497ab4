"""Every command fails the same way: bad input gives one ``error:`` line on stderr that says what
to change, exit status 2, no traceback, and every input file left exactly as it was."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import shutil
import sys
import zipfile
from pathlib import Path

import h5py
import pytest
import torch
from benchmark_modules import load_benchmark
from cli_benchmark_cases import benchmark_cases, training_benchmark_cases

from rpg_base.cli import command_status
from rpg_env.record import record

COMMANDS = {
    "play": "rpg_env.play.__main__", "record": "rpg_env.record",
    "trajectories": "rpg_env.trajectories.__main__", "experts": "rpg_env.experts.__main__",
    "demo": "rpg_env.demo", "export_minari": "rpg_env.export_minari", "train": "rpg_worldmodel.train",
    "evaluate": "rpg_worldmodel.evaluate", "report": "rpg_worldmodel.report.__main__",
    "pipeline": "rpg_worldmodel.pipeline", "wm_play": "rpg_worldmodel.play", "dream": "rpg_worldmodel.dream",
    "imitate": "rpg_worldmodel.imitate", "ship": "rpg_worldmodel.ship",
    "learn": "rpg_worldmodel.learn",
}
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
TINY_MODEL = ["model.width=24", "model.num_heads=2", "model.num_layers=1", "model.num_frames=3",
              "train.max_steps=2", "train.warmup_steps=1", "train.batch_size=8", "train.eval_every=2",
              "train.checkpoint_every=2", "train.progress=false", "data.max_val_windows=16"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A trajectory file, a checkpoint, and broken or foreign files of every kind."""
    root = tmp_path_factory.mktemp("cli_inputs")
    good = root / "good.h5"
    record("greedy", good, 12, seed=0, num_envs=6, mode="w", progress=False)
    from rpg_worldmodel.config import load_world_model_config
    from rpg_worldmodel.train import train

    cfg = load_world_model_config(None, TINY_MODEL)
    cfg.data.path, cfg.out_dir = str(good), str(root / "run")
    checkpoint = Path(train(cfg).checkpoint)
    paths = {"good": good, "run": root / "run", "checkpoint": checkpoint, "missing": root / "missing.h5"}
    paths["other_game"] = root / "radius3.h5"
    record("greedy", paths["other_game"], 2, seed=0, num_envs=2, mode="w", progress=False,
           env_kwargs={"vision_radius": 3})
    paths["folder"] = root / "notes"  # a folder of someone's own files
    paths["folder"].mkdir()
    (paths["folder"] / "todo.txt").write_text("mine\n")
    paths["good_copy"] = root / "good_copy.h5"
    shutil.copy(good, paths["good_copy"])
    paths["empty"] = root / "empty.h5"
    paths["empty"].write_bytes(b"")
    paths["text"] = root / "notes.h5"
    paths["text"].write_text("these are not trajectories\n")
    paths["foreign_h5"] = root / "foreign.h5"
    with h5py.File(paths["foreign_h5"], "w") as f:
        f["x"] = [1, 2, 3]
    paths["truncated"] = root / "truncated.h5"
    paths["truncated"].write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    paths["bad_yaml"] = root / "bad.yaml"
    paths["bad_yaml"].write_text("train: {max_steps: [1,\n")
    paths["bad_json"] = root / "metrics.json"
    paths["bad_json"].write_text('{"files": {')
    paths["foreign_json"] = root / "other.json"
    paths["foreign_json"].write_text(json.dumps({"hello": "world"}))
    paths["json_list"] = root / "list.json"
    paths["json_list"].write_text("[1, 2, 3]\n")
    paths["json_object"] = root / "object.json"
    paths["json_object"].write_text("{}\n")
    paths["not_a_zip"] = root / "model.zip"
    paths["not_a_zip"].write_text("not a zip")
    paths["foreign_zip"] = root / "foreign.zip"
    with zipfile.ZipFile(paths["foreign_zip"], "w") as z:
        z.writestr("data", json.dumps({"policy_class": "x"}))
    # A checkpoint whose weights were edited to another shape, and one whose meta.json is corrupt.
    paths["reshaped"] = root / "reshaped"
    shutil.copytree(checkpoint, paths["reshaped"])
    state = torch.load(paths["reshaped"] / "model.pt", weights_only=True)
    name = next(iter(state))
    state[name] = torch.zeros(*state[name].shape[:-1], state[name].shape[-1] + 1)
    torch.save(state, paths["reshaped"] / "model.pt")
    paths["corrupt_meta"] = root / "corrupt_meta"
    shutil.copytree(checkpoint, paths["corrupt_meta"])
    (paths["corrupt_meta"] / "meta.json").write_text('{"format": "rpg_worldmodel.checkpoint", ')
    return paths


def _cases() -> list[tuple[str, str, list[str], str]]:
    """(command, input kind, argv with {placeholders}, expected message fragment)."""
    h5_inputs = [("missing", "does not exist"), ("empty", "empty"), ("text", "not an HDF5 file"),
                 ("foreign_h5", "not an rpg_env trajectory file"), ("truncated", "truncated")]
    cases = []
    for kind, message in h5_inputs:  # every command that reads a trajectory file, on each broken one
        cases += [
            ("trajectories", kind, ["info", f"{{{kind}}}"], message),
            ("trajectories", kind, ["validate", f"{{{kind}}}"], message),
            ("export_minari", kind, [f"{{{kind}}}", "--dataset-id", "cli/errors-v0", "--no-progress"],
             message),
            ("train", kind, ["--data", f"{{{kind}}}", "--out", "{tmp}/run", *TINY_MODEL], message),
            ("evaluate", kind, ["--checkpoint", "{checkpoint}", "--data", f"{{{kind}}}"], message),
        ]
        if kind != "missing":  # recording appends to an existing file; a missing one is created
            cases += [
                ("record", kind, ["--policy", "random", "--episodes", "1", "--out", f"{{{kind}}}",
                                  "--no-progress"], message),
                ("play", kind, ["--record", f"{{{kind}}}", "--max-frames", "1"], message),
            ]
    return (cases + _input_cases() + _range_cases() + _learn_cases() + _device_cases() + _output_cases()
            + benchmark_cases() + training_benchmark_cases() + _path_cases())


def _device_cases() -> list[tuple[str, str, list[str], str]]:
    """Devices a command cannot train on: refused by the config's validate before any work."""
    return [
        ("experts", "not a device", ["train", "--algo", "trxl-ppo", "--out", "{tmp}/e", "device=gpu"],
         "device='gpu' is not a torch device"),
        ("experts", "auto device", ["train", "--out", "{tmp}/e", "device=auto"], "device must name a device"),
        ("learn", "not a device", ["--out", "{tmp}/l", "device=gpu0"], "device='gpu0' is not a torch device"),
    ]


def _input_cases() -> list[tuple[str, str, list[str], str]]:
    """Files and settings of the wrong kind, one command at a time."""
    return [
        ("trajectories", "truncated", ["repair", "{truncated}", "{tmp}/repaired.h5"], "truncated"),
        ("record", "other game", ["--policy", "random", "--episodes", "1", "--out", "{good}",
                                  "--vision-radius", "2", "--no-progress"], "recorded with other settings"),
        ("record", "missing policy", ["--policy", "{tmp}/nope.zip", "--episodes", "1", "--out",
                                      "{tmp}/x.h5"], "does not exist"),
        ("record", "not a zip", ["--policy", "{not_a_zip}", "--episodes", "1", "--out", "{tmp}/x.h5"],
         "not a Stable-Baselines3 model zip"),
        ("experts", "not a zip", ["evaluate", "{not_a_zip}", "--episodes", "2"], "not a Stable-Baselines3"),
        ("experts", "foreign zip", ["evaluate", "{foreign_zip}", "--episodes", "2"], "rpg_expert"),
        ("experts", "missing model", ["watch", "{tmp}/nope.zip", "--out", "{tmp}/w.gif"], "does not exist"),
        ("experts", "malformed config", ["train", "--config", "{bad_yaml}", "--out", "{tmp}/e"],
         "not valid YAML"),
        ("experts", "unknown key", ["train", "--out", "{tmp}/e", "gama=0.9"], "did you mean"),
        ("experts", "trxl-ppo on a frame stack", ["train", "--algo", "trxl-ppo", "--out", "{tmp}/e",
                                                  "frame_stack=3"], "frame_stack=1"),
        ("experts", "unknown memory setting", ["train", "--algo", "trxl-ppo", "--out", "{tmp}/e",
                                               "memory.layer_norm=middle"], "memory.layer_norm"),
        ("experts", "unknown env id", ["train", "--out", "{tmp}/e", "env_id=Pong-v5"],
         "not a registered Gymnasium env"),
        ("play", "missing co-policy", ["--co-policy", "{tmp}/nope.zip", "--max-frames", "1"],
         "no such model file"),
        ("train", "malformed config", ["--data", "{good}", "--config", "{bad_yaml}", "--out", "{tmp}/r"],
         "not valid YAML"),
        ("train", "unknown key", ["--data", "{good}", "--out", "{tmp}/r", "train.max_stepz=3"],
         "did you mean"),
        ("train", "ignored override", ["--resume", "{run}", "out_dir={tmp}/elsewhere"], "resume"),
        ("train", "empty glob", ["--data", "{tmp}/shards/*.h5", "--out", "{tmp}/r", *TINY_MODEL],
         "matches no file"),
        ("train", "files of two games", ["--data", "{good}", "{other_game}", "--out", "{tmp}/r", *TINY_MODEL],
         "records another game"),
        ("train", "same recording twice", ["--data", "{good}", "--data", "{good_copy}", "--out", "{tmp}/r",
                                           *TINY_MODEL], "same recording"),
        ("train", "negative memory budget", ["--data", "{good}", "--out", "{tmp}/r", "data.max_memory_mb=-1"],
         "data.max_memory_mb"),
        ("train", "wrong shape", ["--resume", "{reshaped}"], "shape"),
        ("train", "missing start", ["--data", "{good}", "--out", "{tmp}/r", *TINY_MODEL,
                                    "train.init_from={tmp}/nowhere"], "nowhere: checkpoint"),
        ("train", "start of another model", ["--data", "{good}", "--out", "{tmp}/r", *TINY_MODEL,
                                             "model.width=32", "train.init_from={run}"],
         "use the checkpoint's model settings"),
        ("train", "start changed on resume", ["--resume", "{run}", "train.init_from={checkpoint}"],
         "keeps the train.init_from"),
        ("evaluate", "missing checkpoint", ["--checkpoint", "{tmp}/none", "--data", "{good}"],
         "does not exist"),
        ("evaluate", "wrong shape", ["--checkpoint", "{reshaped}", "--data", "{good}"], "shape"),
        ("evaluate", "malformed JSON", ["--checkpoint", "{corrupt_meta}", "--data", "{good}"], "JSON"),
        ("evaluate", "ignored option", ["--checkpoint", "{checkpoint}", "--data", "{good}",
                                        "--masked-checkpoint", "{checkpoint}"], "--masks"),
        ("report", "missing metrics", ["--metrics", "{tmp}/none.json"], "does not exist"),
        ("report", "malformed JSON", ["--metrics", "{bad_json}"], "JSON"),
        ("report", "foreign JSON", ["--metrics", "{foreign_json}"], "metrics"),
        ("pipeline", "unknown key", ["--out", "{tmp}/p", "--quick", "model.widht=8"], "did you mean"),
        ("pipeline", "ignored override", ["--out", "{tmp}/p", "--quick", "data.path={good}"], "data.path"),
        ("pipeline", "missing expert", ["--out", "{tmp}/p", "--self-expert", "{tmp}/nope.zip"],
         "does not exist"),
    ]


def _range_cases() -> list[tuple[str, str, list[str], str]]:
    """Out-of-range and zero numbers, unknown devices and ids the downstream library would reject:
    refused by the argument types of `rpg_base.cli` (or a config's validate) before any work."""
    rec = ["--policy", "random", "--episodes", "1", "--out", "{tmp}/r.h5", "--no-progress"]
    return [
        ("play", "zero fps", ["--fps", "0", "--max-frames", "1"], "--fps must be > 0"),
        ("play", "tiny map", ["--height", "2", "--max-frames", "1"], "height and width must be >= 3"),
        ("record", "gzip level 10", [*rec, "--compression-level", "10"], "level must be in [0, 9]"),
        ("record", "zero worlds", [*rec, "--num-envs", "0"], "--num-envs must be >= 1"),
        ("record", "spawn rate over 1", [*rec, "--spawn-prob", "2"], "spawn_prob"),
        ("experts", "zero-height map", ["train", "--out", "{tmp}/e", "env.height=0"], "env: height"),
        ("experts", "zero episodes", ["evaluate", "{expert}", "--episodes", "0"], "--episodes must be >= 2"),
        ("experts", "zero fps", ["watch", "{expert}", "--out", "{tmp}/w.gif", "--fps", "0"], "must be >= 1"),
        ("demo", "zero fps", ["--out", "{tmp}/demo", "--fps", "0"], "--fps must be > 0"),
        ("demo", "bad turns", ["--out", "{tmp}/demo", "--turns", "0"], "--turns must be >= 1"),
        ("export_minari", "id with a space", ["{good}", "--dataset-id", "bad id", "--no-progress"],
         "Minari id"),
        ("export_minari", "id without version", ["{good}", "--dataset-id", "cli/errors", "--no-progress"],
         "version is required"),
        ("export_minari", "negative max episodes",
         ["{good}", "--dataset-id", "cli/errors-v0", "--max-episodes", "-1", "--no-progress"],
         "--max-episodes must be >= 1"),
        ("train", "negative stop", ["--data", "{good}", "--out", "{tmp}/r", "--stop-at", "-1", *TINY_MODEL],
         "--stop-at must be >= 1"),
        ("train", "unknown device", ["--data", "{good}", "--out", "{tmp}/r", *TINY_MODEL, "train.device=foo"],
         "is not a torch device"),
        ("evaluate", "negative bootstrap",
         ["--checkpoint", "{checkpoint}", "--data", "{good}", "--bootstrap", "-1"], "must be >= 2"),
        ("evaluate", "zero batch", ["--checkpoint", "{checkpoint}", "--data", "{good}", "--batch-size", "0"],
         "--batch-size must be >= 1"),
        ("evaluate", "unknown device",
         ["--checkpoint", "{checkpoint}", "--data", "{good}", "--device", "foo"], "not a torch device"),
        ("pipeline", "zero games", ["--out", "{tmp}/p", "--quick", "--self-games", "0"], "--self-games"),
        ("pipeline", "expert not a zip", ["--out", "{tmp}/p", "--quick", "--cross-expert", "{not_a_zip}"],
         "not a Stable-Baselines3 model zip"),
        ("pipeline", "unknown expert", ["--out", "{tmp}/p", "--quick", "--self-expert", "bogus"],
         "unknown expert"),
        ("wm_play", "zero steps", ["--agent", "greedy", "--out", "{tmp}/p.gif", "--steps", "0"],
         "--steps must be >= 1"),
        ("dream", "zero temperature", ["--out", "{tmp}/d", "--temperature", "0"],
         "--temperature must be > 0"),
        ("dream", "zero-height map", ["--out", "{tmp}/d", "env.height=0"], "env: height"),
        ("dream", "missing checkpoint", ["--checkpoint", "{tmp}/nowhere", "--out", "{tmp}/d"],
         "does not exist"),
        ("imitate", "one episode", ["--episodes", "1"], "--episodes must be >= 2"),
        ("train", "zero motion reach", ["--data", "{good}", "--out", "{tmp}/m", "model.motion_reach=0"],
         "model.motion_reach must be >= 1"),
        ("train", "negative refiner stage",
         ["--data", "{good}", "--out", "{tmp}/r", "train.refiner_stage=-1"],
         "train.refiner_stage must be >= 0"),
        ("ship", "missing dream run", ["dream", "{tmp}/nowhere"], "not a finished dream run"),
    ]


def _learn_cases() -> list[tuple[str, str, list[str], str]]:
    """The IRIS loop's settings, resume and real-game choice, refused before any game is played."""
    return [
        ("learn", "zero steps", ["--out", "{tmp}/l", "--steps", "0"], "--steps must be >= 1"),
        ("learn", "unknown key", ["--out", "{tmp}/l", "colect_steps=10"], "collect_steps"),
        ("learn", "no imagination threads", ["--out", "{tmp}/l", "imagination_threads=0"],
         "imagination_threads must be >= 1"),
        ("learn", "a floor of one", ["--out", "{tmp}/l", "sample_floor=1"],
         "model.sample_floor must be a probability in [0, 1)"),
        ("learn", "one evaluation game", ["--out", "{tmp}/l", "eval_episodes=1"],
         "eval_episodes must be >= 2"),
        ("learn", "bad world-model override", ["--out", "{tmp}/l", "world_model=[model.widht=8]"],
         "did you mean"),
        ("learn", "bad agent override", ["--out", "{tmp}/l", "agent=[hyperparams.gama=0.5]"], "gamma"),
        ("learn", "resume with settings", ["--resume", "{tmp}/l", "--seed", "5"],
         "takes no other argument but --steps"),
        ("learn", "resume nothing", ["--resume", "{tmp}/nowhere"], "no learn run there"),
        ("learn", "unknown env id", ["--out", "{tmp}/l", "--env-id", "MiniGrid-DoorKey-55-v0"],
         "is not a registered Gymnasium env; did you mean MiniGrid-DoorKey-5x5-v0"),
        ("learn", "unknown env argument", ["--out", "{tmp}/l", "--env-id", "MiniGrid-DoorKey-5x5-v0",
                                           "env.sizee=6"], "env.size"),
    ]


def _output_cases() -> list[tuple[str, str, list[str], str]]:
    """Outputs that are folders, files under files, or folders holding a run or unrelated content."""
    return [
        ("record", "output is a folder", ["--policy", "random", "--episodes", "1", "--out", "{folder}"],
         "is a folder"),
        ("trajectories", "repair into a folder", ["repair", "{good}", "{folder}", "--overwrite"],
         "is a folder"),
        ("play", "record into a folder", ["--record", "{folder}", "--max-frames", "1"], "is a folder"),
        ("experts", "JSON into a folder", ["evaluate", "{expert}", "--json", "{folder}"], "is a folder"),
        ("demo", "output folder is a file", ["--out", "{text}"], "is a file"),
        ("train", "run folder is a file", ["--data", "{good}", "--out", "{text}", *TINY_MODEL], "is a file"),
        ("train", "run folder holding other files", ["--data", "{good}", "--out", "{folder}", *TINY_MODEL],
         "does not write"),
        ("pipeline", "folder holding a training run", ["--out", "{run}", "--quick"], "does not write"),
        ("pipeline", "folder holding other files", ["--out", "{folder}", "--quick", "--overwrite"],
         "does not write"),
        ("pipeline", "output is a file", ["--out", "{text}", "--quick"], "is a file"),
        ("imitate", "JSON into a folder", ["--json", "{folder}", "--episodes", "2"], "is a folder"),
        ("learn", "folder holding other files", ["--out", "{folder}"], "does not write"),
        ("learn", "output is a file", ["--out", "{text}"], "is a file"),
    ]


def _path_cases() -> list[tuple[str, str, list[str], str]]:
    """Paths under a file, and files or folders of the wrong kind: the message names the argument and
    what to give, never a raw OS error ("[Errno 20] Not a directory"), and nothing is made first."""
    out, under = ["--out", "{tmp}/o.json"], "{text}/sub"
    eff = ["--methods", "dqn", *out]
    return [
        ("record", "output under a file", ["--policy", "random", "--episodes", "1", "--out", f"{under}.h5"],
         "is a file, so"),
        ("trajectories", "repair under a file", ["repair", "{good}", f"{under}.h5"], "is a file, so"),
        ("wm_play", "recording under a file", ["--agent", "greedy", "--out", f"{under}.gif"],
         "is a file, so"),
        ("demo", "output under a file", ["--out", under], "is a file, so no folder can be made"),
        ("experts", "run folder under a file", ["train", "--out", under], "is a file, so no folder"),
        ("train", "run folder under a file", ["--data", "{good}", "--out", under, *TINY_MODEL],
         "is a file, so no folder"),
        ("evaluate", "output under a file",
         ["--checkpoint", "{checkpoint}", "--data", "{good}", "--out", under], "is a file, so no folder"),
        ("dream", "run folder under a file", ["--out", under], "is a file, so no folder"),
        ("pipeline", "output under a file", ["--out", under, "--quick"], "is a file, so no folder"),
        ("learn", "run folder under a file", ["--out", under], "is a file, so no folder"),
        ("learn", "resume a folder of other files", ["--resume", "{folder}"], "no learn run there"),
        ("learn", "resume a file", ["--resume", "{text}"], "no learn run there"),
        ("learn", "a budget too small to split", ["--out", "{tmp}/l", "--steps", "200", "collect_steps=100"],
         "needs 3 to fill its train and validation games"),
        ("bench:sample_efficiency", "merge plain text", ["--merge", "{text}", *eff], "is not valid JSON"),
        ("bench:sample_efficiency", "merge an empty file", ["--merge", "{empty}", *eff], "is empty"),
        ("bench:sample_efficiency", "merge a JSON list", ["--merge", "{json_list}", *eff],
         "list.json is not a result of benchmarks/sample_efficiency.py"),
        ("bench:sample_efficiency", "merge an empty object", ["--merge", "{json_object}", *eff],
         "is not a result of benchmarks/sample_efficiency.py"),
        ("bench:sample_efficiency", "learn runs from a missing folder", ["--learn-from", "{tmp}/none", *eff],
         "/none is not a learn run"),
        ("bench:sample_efficiency", "learn runs from a file", ["--learn-from", "{text}", *eff],
         "is not a learn run"),
        ("bench:sample_efficiency", "run folders kept under a file", ["--keep", under, *eff],
         "is a file, so no folder"),
        ("bench:memory_agents", "quick resume of no folder", ["--quick", "--resume", *out],
         "give the --runs folder of the quick run"),
        ("bench:memory_agents", "runs under a file", ["--runs", under, *out], "is a file, so no folder"),
        ("bench:remembering_agents", "runs under a file",
         ["--data-memory", "{good}", "--data-memoryless", "{good}", "--runs", under, *out],
         "is a file, so no folder"),
        ("bench:recording", "kept files under a file", ["--quick", "--keep", under, *out],
         "is a file, so no folder"),
        ("bench:worldmodel_context", "data under a file", ["--quick", "--data", f"{under}.h5", *out],
         "is a file, so"),
        ("bench:worldmodel_time_to_quality", "data under a file", ["--quick", "--data", f"{under}.h5", *out],
         "is a file, so"),
    ]


def _main(command: str):
    if not command.startswith("bench:"):
        return importlib.import_module(COMMANDS[command]).main
    return load_benchmark(command.removeprefix("bench:")).main


def _digest(path: Path) -> str | None:
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    if path.is_dir():
        return hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in sorted(path.rglob("*"))
                                       if p.is_file())).hexdigest()
    return None


@pytest.mark.parametrize(("command", "kind", "argv", "message"), _cases(),
                         ids=[f"{c}-{k}-{i}" for i, (c, k, *_) in enumerate(_cases())])
def test_bad_input_gives_one_line_exit_2_and_changes_nothing(command, kind, argv, message, inputs, tmp_path,
                                                             capsys, monkeypatch):
    from rpg_env.experts import pretrained_path

    values = {name: str(path) for name, path in inputs.items()} | {"tmp": str(tmp_path),
                                                                   "expert": str(pretrained_path("dqn"))}
    argv = [arg.format(**values) for arg in argv]
    before = {name: _digest(path) for name, path in inputs.items()}
    main = _main(command)
    monkeypatch.chdir(tmp_path)  # a default output folder (runs/, out/) would land here
    assert command_status(main, argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    assert message.lower() in err.lower(), err
    assert {name: _digest(path) for name, path in inputs.items()} == before
    assert not list(tmp_path.iterdir()), "refusing wrote files"


def test_the_modules_exit_2_with_one_line(inputs, tmp_path):
    """The same through ``python -m`` and ``python benchmarks/X.py`` (real processes, not just
    ``main``)."""
    import os
    import subprocess

    # the checkout's packages, also for a script (whose own folder is first on its path)
    paths = [str(BENCHMARKS.parent), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    for command in (["-m", "rpg_env.trajectories", "info", str(inputs["truncated"])],
                    ["-m", "rpg_worldmodel.evaluate", "--checkpoint", str(inputs["reshaped"]),
                     "--data", str(inputs["good"])],
                    [str(BENCHMARKS / "worldmodel_streaming.py"), "--quick", "--data", str(inputs["text"]),
                     "--out", str(tmp_path / "o.json")]):
        proc = subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=300,
            env=env)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: "), proc.stderr
    assert not list(tmp_path.iterdir())
