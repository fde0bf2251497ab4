"""Evaluation metrics, baselines and bootstrap intervals on hand-made data with known answers."""

import math

import numpy as np
import pytest

from rpg_worldmodel.evaluation import metrics as M
from rpg_worldmodel.evaluation.baselines import ActionFrequencies, CalibratedCells
from rpg_worldmodel.evaluation.oracles import action_deltas, copy_view, shift_view, views_to_codes

CHANNELS = ("empty", "wall", "gem", "bone", "food", "agent")
EMPTY, WALL, GEM, BONE, FOOD, AGENT = range(6)
DELTAS = action_deltas(("up", "down", "left", "right"))


def _one_hot_log_probs(pred: np.ndarray, p_right: float, num_classes: int = 6) -> np.ndarray:
    """Log-probs putting ``p_right`` on ``pred`` and the rest uniformly elsewhere."""
    probs = np.full((*pred.shape[:1], num_classes, *pred.shape[1:]), (1 - p_right) / (num_classes - 1))
    np.put_along_axis(probs, pred[:, None], p_right, axis=1)
    return np.log(probs)


# ------------------------------------------------------------------------------ metrics
def test_view_counts_known_answers():
    target = np.array([[[GEM, EMPTY, EMPTY], [EMPTY, AGENT, BONE], [WALL, WALL, WALL]]])
    pred = target.copy()
    pred[0, 0, 0] = EMPTY  # a missed gem (false negative gem, false positive empty)
    pred[0, 1, 2] = GEM  # a bone called a gem (fp gem, fn bone)
    previous = target.copy()
    previous[0, 0, 0] = EMPTY  # the gem appeared: changed
    previous[0, 0, 1] = FOOD  # food eaten: changed, predicted right (empty)
    counts = M.view_counts(_one_hot_log_probs(pred, 0.5), target, previous)
    figs = M.figures_from_counts({k: v.sum(0) for k, v in counts.items()}, CHANNELS)
    assert figs["view_ce"] == pytest.approx(-math.log(0.5) * 7 / 9 - math.log(0.1) * 2 / 9)
    assert figs["cell_acc"] == pytest.approx(7 / 9)
    assert figs["changed_acc"] == pytest.approx(1 / 2)
    # gem: tp 0, fp 1, fn 1 -> precision 0, recall 0, F1 0
    assert figs["precision_gem"] == 0 and figs["recall_gem"] == 0 and figs["f1_gem"] == 0
    # bone: never predicted -> precision undefined (NaN), recall 0
    assert np.isnan(figs["precision_bone"]) and figs["recall_bone"] == 0
    assert figs["f1_wall"] == 1 and figs["f1_agent"] == 1
    # food: absent from target and prediction -> all undefined
    assert np.isnan(figs["f1_food"])


def test_view_counts_f1_partial():
    target = np.zeros((1, 3, 3), dtype=np.int64)
    target[0, 0, :] = GEM  # 3 gems
    pred = np.zeros_like(target)
    pred[0, 0, :2] = GEM  # 2 found
    pred[0, 2, 2] = GEM  # 1 false alarm
    counts = M.view_counts(_one_hot_log_probs(pred, 0.9), target, target)
    figs = M.figures_from_counts({k: v.sum(0) for k, v in counts.items()}, CHANNELS)
    assert figs["precision_gem"] == pytest.approx(2 / 3)
    assert figs["recall_gem"] == pytest.approx(2 / 3)
    assert figs["f1_gem"] == pytest.approx(2 / 3)
    assert np.isnan(figs["changed_acc"])  # nothing changed


def test_action_counts_and_bad_shapes():
    lp = np.log(np.array([[0.7, 0.1, 0.1, 0.1], [0.25, 0.25, 0.4, 0.1]]))
    counts = M.action_counts(lp, np.array([0, 3]))
    figs = M.figures_from_counts({k: v.sum(0) for k, v in counts.items()}, CHANNELS)
    assert figs["action_acc"] == pytest.approx(0.5)
    assert figs["action_ce"] == pytest.approx(-(math.log(0.7) + math.log(0.1)) / 2)
    with pytest.raises(ValueError, match="0..3"):
        M.action_counts(lp, np.array([0, 4]))
    with pytest.raises(ValueError, match=r"\(N, C, V, V\)"):
        M.view_counts(np.zeros((2, 6, 3)), np.zeros((2, 3, 3), int), np.zeros((2, 3, 3), int))


def test_no_action_after_a_games_last_step_counts_nothing():
    lp = np.log(np.array([[0.7, 0.1, 0.1, 0.1], [0.25, 0.25, 0.4, 0.1]]))
    counts = M.action_counts(lp, np.array([0, -1]))  # -1: the game's final view, where nothing is taken
    np.testing.assert_array_equal(counts["action_n"], [1, 0])
    np.testing.assert_array_equal(counts["action_correct"], [1, 0])
    assert counts["action_ce_sum"][1] == 0
    with pytest.raises(ValueError, match="-1"):
        M.action_counts(lp, np.array([0, -2]))


def test_end_counts_known_answers():
    logits, ended = np.array([2.0, -2.0, 3.0, -1.0]), np.array([True, False, False, True])
    counts = M.end_counts(logits, ended)
    figs = M.figures_from_counts({k: v.sum(0) for k, v in counts.items()}, CHANNELS)
    # called: steps 0 and 2; ended: 0 and 3 -> one hit, one false end, one missed end
    assert figs["end_f1"] == pytest.approx(2 / (2 + 1 + 1)) and figs["end_recall"] == pytest.approx(0.5)
    bce = [math.log1p(math.exp(x)) for x in (-2, -2, 3, 1)]  # -log of the chance given to what happened
    assert figs["end_ce"] == pytest.approx(sum(bce) / 4)


def test_sum_by_unit_groups_rows():
    counts = {"x": np.array([1.0, 2.0, 3.0, 4.0]), "tp": np.arange(8.0).reshape(4, 2)}
    out = M.sum_by_unit(counts, np.array([1, 0, 1, 1]), 2)
    np.testing.assert_array_equal(out["x"], [2.0, 8.0])
    np.testing.assert_array_equal(out["tp"], [[2, 3], [0 + 4 + 6, 1 + 5 + 7]])


# ------------------------------------------------------------------------------ bootstrap
def _accuracy_fn(totals):
    return {"acc": M.ratio(totals["correct"], totals["n"])}


def _clustered_units(rng, num_units, p):
    """Units of varying size whose success rate varies around ``p`` (correlated within a unit)."""
    sizes = rng.integers(20, 120, size=num_units)
    rates = np.clip(rng.normal(p, 0.1, size=num_units), 0, 1)
    return {"correct": rng.binomial(sizes, rates).astype(float), "n": sizes.astype(float)}


def test_bootstrap_is_deterministic_given_seed():
    units = _clustered_units(np.random.default_rng(0), 30, 0.6)
    a = M.bootstrap_figures(units, _accuracy_fn, 300, seed=5)
    b = M.bootstrap_figures(units, _accuracy_fn, 300, seed=5)
    c = M.bootstrap_figures(units, _accuracy_fn, 300, seed=6)
    assert a == b
    assert a["acc"].value == c["acc"].value and (a["acc"].lo, a["acc"].hi) != (c["acc"].lo, c["acc"].hi)
    assert a["acc"].lo < a["acc"].value < a["acc"].hi


def test_bootstrap_interval_covers_the_truth():
    rng = np.random.default_rng(1)
    truth, hits, trials = 0.6, 0, 150
    for i in range(trials):
        units = _clustered_units(rng, 40, truth)
        iv = M.bootstrap_figures(units, _accuracy_fn, 400, seed=i)["acc"]
        hits += iv.lo <= truth <= iv.hi
    assert 0.85 <= hits / trials <= 0.995, hits / trials


def test_paired_difference_is_tighter_than_either_interval():
    rng = np.random.default_rng(2)
    base = _clustered_units(rng, 40, 0.5)
    better = {"correct": np.minimum(base["correct"] + 3, base["n"]), "n": base["n"]}
    diff = M.bootstrap_differences(better, base, _accuracy_fn, 500, seed=0)["acc"]
    single = M.bootstrap_figures(base, _accuracy_fn, 500, seed=0)["acc"]
    assert diff.lo > 0  # a consistent improvement is detected despite large between-unit spread
    assert diff.hi - diff.lo < (single.hi - single.lo) / 3
    same = M.bootstrap_differences(base, base, _accuracy_fn, 100, seed=0)["acc"]
    assert same.value == same.lo == same.hi == 0
    with pytest.raises(ValueError, match="same units"):
        M.bootstrap_differences(base, {k: v[:-1] for k, v in base.items()}, _accuracy_fn, 10)


def test_seed_bootstrap_resamples_seeds_and_games():
    rng = np.random.default_rng(3)
    games = _clustered_units(rng, 40, 0.6)
    # One seed: the mean is that seed's figure and the interval is the games-only one.
    (one, per_seed) = M.bootstrap_over_seeds([games], _accuracy_fn, 400, seed=0)
    alone = M.bootstrap_figures(games, _accuracy_fn, 400, seed=0)["acc"]
    assert per_seed["acc"] == [pytest.approx(alone.value)]
    got = (one["acc"].value, one["acc"].lo, one["acc"].hi)
    assert got == pytest.approx((alone.value, alone.lo, alone.hi))
    # Seeds that differ by a constant shift on identical games: the mean is the mean of the seeds,
    # and the interval widens by the spread between seeds.
    shifted = [{"correct": np.clip(games["correct"] + d * games["n"], 0, games["n"]), "n": games["n"]}
               for d in (-0.1, 0.0, 0.1)]
    three, per_seed = M.bootstrap_over_seeds(shifted, _accuracy_fn, 400, seed=0)
    assert three["acc"].value == pytest.approx(np.mean(per_seed["acc"]))
    assert per_seed["acc"][0] < per_seed["acc"][1] < per_seed["acc"][2]
    assert three["acc"].hi - three["acc"].lo > (alone.hi - alone.lo) * 1.5
    # Identical seeds give no seed spread: the games-only interval again.
    same, _ = M.bootstrap_over_seeds([games, games], _accuracy_fn, 400, seed=0)
    assert (same["acc"].lo, same["acc"].hi) == pytest.approx((alone.lo, alone.hi))
    with pytest.raises(ValueError, match="same units"):
        M.bootstrap_over_seeds([games, {k: v[:-1] for k, v in games.items()}], _accuracy_fn, 10)


def test_relative_gap_point_value():
    self_units = {"correct": np.array([10.0, 10.0]), "n": np.array([20.0, 20.0])}
    cross_units = {"correct": np.array([15.0, 15.0, 15.0]), "n": np.array([20.0, 20.0, 20.0])}
    gap = M.bootstrap_relative_gap(self_units, cross_units, _accuracy_fn, ["acc"], 50, seed=0)["acc"]
    assert gap.value == pytest.approx(0.5)  # 0.75 vs 0.5
    assert gap.lo == pytest.approx(0.5) and gap.hi == pytest.approx(0.5)  # no spread in either set
    with pytest.raises(ValueError, match="at least one unit"):
        M.resample_weights(0, 10, 0)


# ------------------------------------------------------------------------------ baselines
def _view(rows):
    return np.array([[{".": EMPTY, "#": WALL, "g": GEM, "b": BONE, "f": FOOD, "A": AGENT}[c] for c in r]
                     for r in rows])[None]


BASE = ["#####",
        "#.g.#",
        "#fAb#",
        "#...#",
        "#####"]


@pytest.mark.parametrize("action,expected_rows,revealed_rows", [
    (0, ["?????", "#####", "#.A.#", "#f.b#", "#...#"], [0]),  # up: the gem is eaten
    (1, ["#.g.#", "#f.b#", "#.A.#", "#####", "?????"], [4]),  # down
])
def test_shift_oracle_vertical_moves(action, expected_rows, revealed_rows):
    pred, revealed, blocked = shift_view(_view(BASE), np.array([action]), DELTAS, empty=EMPTY, agent=AGENT,
                                         blocking=[WALL, AGENT])
    assert not blocked[0]
    for i, row in enumerate(expected_rows):
        if i in revealed_rows:
            assert revealed[0, i].all()
            inward = 1 if i == 0 else 3
            np.testing.assert_array_equal(pred[0, i], pred[0, inward])  # placeholder: inward neighbour
        else:
            assert not revealed[0, i].any()
            np.testing.assert_array_equal(pred[0, i], _view([row])[0, 0])


def test_shift_oracle_horizontal_and_blocked_moves():
    open_view = _view(["#####", "#...#", "#.Ag#", "#...#", "#####"])
    pred, revealed, blocked = shift_view(open_view, np.array([3]), DELTAS, empty=EMPTY, agent=AGENT,
                                         blocking=[WALL, AGENT])
    assert revealed[0, :, 4].all() and revealed.sum() == 5 and not blocked[0]
    np.testing.assert_array_equal(pred[0, 2, :4], [EMPTY, EMPTY, AGENT, WALL])  # the gem is eaten
    # left into a wall and right into another agent: blocked, the view stays, nothing revealed
    walled = _view(["#####", "#...#", "##A.#", "#...#", "#####"])
    crowded = _view(["#####", "#...#", "#.AA#", "#...#", "#####"])
    for view, action in ((walled, 2), (crowded, 3)):
        pred, revealed, blocked = shift_view(view, np.array([action]), DELTAS, empty=EMPTY, agent=AGENT,
                                             blocking=[WALL, AGENT])
        assert blocked[0] and not revealed.any()
        np.testing.assert_array_equal(pred, view)
    with pytest.raises(ValueError, match="odd side"):
        shift_view(np.zeros((1, 4, 4), int), np.array([0]), DELTAS, empty=0, agent=5, blocking=[1])
    with pytest.raises(ValueError, match="0..3"):
        shift_view(walled, np.array([4]), DELTAS, empty=0, agent=5, blocking=[1])
    with pytest.raises(ValueError, match="motion oracle cannot be used on this file"):
        action_deltas(("up", "jump"))


def test_motion_oracle_moves_come_from_the_game_table():
    from rpg_env.game.constants import vocabulary

    vocab = vocabulary()
    np.testing.assert_array_equal(DELTAS, vocab.action_deltas)
    # looked up by the file's action names, so another order is followed
    np.testing.assert_array_equal(action_deltas(("right", "up")), vocab.deltas_for(["right", "up"]))


def test_shift_oracle_matches_the_real_game_on_known_cells():
    """With one agent and no spawns, the oracle is exact on every cell that was in view."""
    gymnasium = pytest.importorskip("gymnasium")
    import rpg_env  # noqa: F401

    env = gymnasium.make("Treasurehunt-v0", num_agents=1, spawn_prob=0.0, height=10, width=10,
                         vision_radius=2).unwrapped
    layout = ["##########", "#..g....f#", "#.A..b...#", "#........#", "#..f..g..#",
              "#........#", "#.b......#", "#....g...#", "#........#", "##########"]
    obs, _ = env.reset(seed=0, options={"layout": layout})
    rng = np.random.default_rng(0)
    blocked_seen = 0
    for _ in range(200):
        action = int(rng.integers(4))
        nxt, _, _, truncated, info = env.step(action)
        pred, revealed, blocked = shift_view(views_to_codes(obs[None]), np.array([action]), DELTAS,
                                             empty=EMPTY, agent=AGENT, blocking=[WALL, AGENT])
        truth = views_to_codes(nxt[None])
        assert blocked[0] == info["bumped"]
        blocked_seen += int(blocked[0])
        np.testing.assert_array_equal(pred[~revealed], truth[~revealed])
        obs = nxt
        if truncated:
            obs, _ = env.reset(seed=1, options={"layout": layout})
    assert blocked_seen > 0


def test_calibrated_cells_probabilities():
    cal = CalibratedCells(6, alpha=0.5)
    target = np.full((10, 3, 3), EMPTY)
    target[:, 0, 0] = GEM
    pred, revealed = copy_view(target)
    cal.update(pred, revealed, target)
    lp = cal.log_probs(pred, revealed)
    assert lp.shape == (10, 6, 3, 3) and np.isfinite(lp).all()
    np.testing.assert_allclose(np.exp(lp).sum(1), 1.0, rtol=1e-5)
    assert (lp.argmax(1) == target).all()
    # a class never seen as the conditioning class falls back to the uniform prior
    unseen = cal.log_probs(np.full((1, 3, 3), BONE), np.zeros((1, 3, 3), bool))
    np.testing.assert_allclose(np.exp(unseen), 1 / 6, rtol=1e-5)
    with pytest.raises(ValueError, match="alpha"):
        CalibratedCells(6, alpha=0)


def test_action_frequencies_majority_and_previous():
    prev = np.array([0, 0, 1, 1, 1, 2])
    nxt = np.array([0, 0, 1, 1, 1, 1])
    majority = ActionFrequencies(4, order=0)
    majority.update(prev, nxt)
    assert majority.majority == 1
    assert (majority.log_probs(np.array([0, 3])).argmax(1) == 1).all()
    markov = ActionFrequencies(4, order=1)
    markov.update(prev, nxt)
    assert list(markov.log_probs(np.array([0, 1])).argmax(1)) == [0, 1]
    np.testing.assert_allclose(np.exp(markov.log_probs(np.arange(4))).sum(1), 1.0, rtol=1e-5)
    with pytest.raises(ValueError, match="order"):
        ActionFrequencies(4, order=2)
