"""Open-loop rollouts: every predictor rolled forward on the recorded actions, scored per horizon."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rpg_worldmodel.checkpoint import load_checkpoint
from rpg_worldmodel.evaluate import main as evaluate_main
from rpg_worldmodel.evaluation.baselines import fit_baselines
from rpg_worldmodel.evaluation.episodes import checkpoint_split, select_episodes
from rpg_worldmodel.evaluation.rollouts import FIGURES, PREDICTORS, rollout_starts, rollout_table


@pytest.fixture(scope="module")
def setting(tiny_world_model):
    run, data = tiny_world_model
    ck = load_checkpoint(run)
    es = select_episodes(ck.record, data, "test")
    fb = fit_baselines(data, checkpoint_split(ck.record)["train"],
                       reward_values=ck.config.model.reward_values)
    return ck, es, fb


def test_starts_hold_the_context_and_the_real_future(setting):
    ck, es, _ = setting
    starts = rollout_starts(es, num_frames=3, horizon=4)
    assert starts.views.shape[1:] == (3 + 4, 6, 9, 9) and starts.actions.shape[1] == 3 + 4 - 1
    store = es.store()
    views, actions = store.episode(int(starts.rows[1]))
    first = np.flatnonzero(starts.rows == starts.rows[1])[0]
    offset = 4 * (1 - first)  # starts of one episode are H apart
    np.testing.assert_array_equal(starts.views[1], views[offset : offset + 7])
    with pytest.raises(ValueError, match="no episode"):
        rollout_starts(es, num_frames=3, horizon=200)
    # The longest rollout an episode holds reads nothing past it, the store's last episode included
    # (it once read one action past the last episode's end and failed).
    longest = int(store.lengths.max()) - 3
    whole = rollout_starts(es, num_frames=3, horizon=longest)
    last = len(store) - 1
    if store.lengths[last] == store.lengths.max():
        assert last in whole.rows
    views, actions = store.episode(int(whole.rows[-1]))
    np.testing.assert_array_equal(whole.views[-1], views[: 3 + longest])
    np.testing.assert_array_equal(whole.actions[-1], actions[: 3 + longest - 1])
    with pytest.raises(ValueError, match="no episode"):
        rollout_starts(es, num_frames=3, horizon=longest + 1)


def test_every_predictor_is_scored_at_every_horizon(setting):
    ck, es, fb = setting
    table, strip = rollout_table(ck.model, ck.config, es, fb, horizon=6, num_boot=100, seed=0)
    assert table["horizon"] == 6 and set(table["predictors"]) == set(PREDICTORS)
    for name, columns in table["predictors"].items():
        assert set(columns) == set(FIGURES), name
        for figure, per_k in columns.items():
            assert len(per_k) == 6
            for iv in per_k:
                if iv["value"] is not None and iv["lo"] is not None:
                    assert iv["lo"] - 1e-9 <= iv["value"] <= iv["hi"] + 1e-9, (name, figure)
    preds = table["predictors"]
    # At k = 1 every model variant starts from the same real context: the same prediction.
    for figure in ("view_ce", "cell_acc", "reward_acc"):
        first = {preds[name][figure][0]["value"] for name in ("model", "model_sampled", "teacher_forced")}
        assert len(first) == 1
    # Copying one view forever cannot change which cells it predicts: its accuracy never rises.
    copy_acc = [iv["value"] for iv in preds["copy"]["cell_acc"]]
    assert copy_acc[-1] <= copy_acc[0]
    assert set(table["model_minus"]) == {"memory_oracle", "motion_oracle", "copy"}
    assert strip["real"].shape == (7, 9, 9) and strip["imagined"].shape == (6, 9, 9)
    again, _ = rollout_table(ck.model, ck.config, es, fb, horizon=6, num_boot=100, seed=0)
    assert again == table  # seeded: sampling and bootstrap


def test_evaluate_cli_writes_the_rollout_table_and_strip(tiny_world_model, tmp_path):
    run, data = tiny_world_model
    out = tmp_path / "eval"
    assert evaluate_main(["--checkpoint", str(run), "--data", str(data), "--out", str(out),
                          "--bootstrap", "50", "--rollout-horizon", "4"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["rollout"]["horizon"] == 4
    assert len(metrics["rollout"]["predictors"]["motion_oracle"]["view_ce"]) == 4
    assert (out / "rollout_strip.npz").exists()
