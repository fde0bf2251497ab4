"""World model: shapes, causality over steps, its loss and parameter groups, input masks, the parts
of older schemas, imagination."""

import pytest
import torch
import torch.nn.functional as F

from rpg_env.game.constants import vocabulary
from rpg_worldmodel.config import ModelConfig
from rpg_worldmodel.data.masks import MASKED_CHANNELS, apply_input_mask, mask_choices, masked_channels
from rpg_worldmodel.models.heads import reward_weights
from rpg_worldmodel.models.world_model import ACTION_LOSS_WEIGHT, WorldModel

TINY = dict(width=24, num_heads=2, num_layers=2, num_frames=4, reward_values=(-10.0, -1.0, 0.0, 5.0, 10.0))
MEMORY_MAP = dict(memory_map=True)


def _views(b, t, v=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 6, (b, t, v, v), generator=g)
    return F.one_hot(codes, 6).permute(0, 1, 4, 2, 3).float()


def _model(**kw):
    torch.manual_seed(0)
    return WorldModel(ModelConfig(**{**TINY, **kw})).eval()


def test_output_shapes_for_full_and_shorter_windows():
    model = _model()
    for t in (4, 2, 1):
        out = model(_views(3, t), torch.randint(0, 4, (3, t)))
        view_logits, action_logits, reward_logits, end_logits = out
        assert view_logits.shape == (3, t, 6, 9, 9) and action_logits.shape == (3, t, 4)
        assert torch.isfinite(view_logits).all() and torch.isfinite(action_logits).all()
        assert reward_logits.shape == (3, t, 5) and end_logits.shape == (3, t)
    # a fifth action ("stay") is one more action to learn the shift of: nothing to declare
    other = _model(view_size=12, patch_size=4, num_actions=5, reward_head=False, memory_map=True)
    vl, al, rl, _ = other(_views(2, 3, v=12), torch.randint(0, 5, (2, 3)))
    assert rl is None
    assert vl.shape == (2, 3, 6, 12, 12) and al.shape == (2, 3, 5)


def test_the_reward_head_has_no_rule_and_reads_the_view_per_action():
    """No reward is written into the model (no table of what entering a kind pays): the per-action
    map of the view is how a reward of the cell a move enters is learned. Set by hand here: action
    0's weight of "a gem above the agent" moves its logits of the gem's class, and no other."""
    from rpg_worldmodel.models.heads import RewardHead

    model = _model(num_actions=5)
    assert isinstance(model.reward_head, RewardHead) and not hasattr(model, "reward_prior")
    views = torch.zeros(1, 2, 6, 9, 9)
    views[:, :, 0] = 1
    views[:, :, :, 3, 4] = 0
    views[:, :, 2, 3, 4] = 1  # a gem above the agent
    stay, up = torch.tensor([[4, 4]]), torch.tensor([[0, 0]])
    assert torch.isfinite(model(views, stay).reward).all()
    with torch.no_grad():
        model.reward_head.by_view.linear.weight.zero_()
        model.reward_head.by_view.linear.bias.zero_()
        base_stay, base_up = model(views, stay).reward, model(views, up).reward
        gem, cells = model.cfg.reward_values.index(10.0), 6 * 9 * 9
        model.reward_head.by_view.linear.weight.view(5, 5, cells)[0, gem, 2 * 81 + 3 * 9 + 4] = 50.0
        after_stay, after_up = model(views, stay).reward, model(views, up).reward
    torch.testing.assert_close(after_stay, base_stay, rtol=0, atol=0)
    expected = base_up.clone()
    expected[..., gem] += 50.0
    torch.testing.assert_close(after_up, expected)
    assert (after_up[0].argmax(-1) == gem).all()


def test_patch_layout_maps_each_cell_back_to_its_place():
    # A cell's logit must depend on that cell's input mostly through the right patch: perturb one
    # cell and check that the view logits of the same patch change most (the motion prior and the
    # memory map move a cell by one step at most, within its patch here).
    model = _model(num_layers=1)
    views, actions = _views(1, 1), torch.zeros(1, 1, dtype=torch.long)
    base = model(views, actions)[0]
    changed = views.clone()
    changed[0, 0, :, 7, 1] = 0
    changed[0, 0, 2, 7, 1] = 1
    delta = (model(changed, actions)[0] - base).abs().sum(2)[0, 0]  # (9, 9)
    per_patch = delta.reshape(3, 3, 3, 3).sum((1, 3))
    assert per_patch.argmax() == 2 * 3 + 0  # patch row 2, column 0 holds cell (7, 1)


def test_predictions_at_step_t_ignore_later_steps():
    model = _model()
    views, actions = _views(2, 4), torch.randint(0, 4, (2, 4))
    v0, a0, r0, e0 = model(views, actions)
    for t in range(3):
        later_v, later_a = views.clone(), actions.clone()
        later_v[:, t + 1:] = _views(2, 3 - t, seed=t + 1)
        later_a[:, t + 1:] = (actions[:, t + 1:] + 1) % 4
        v1, a1, r1, e1 = model(later_v, later_a)
        torch.testing.assert_close(v1[:, :t + 1], v0[:, :t + 1], rtol=0, atol=1e-6)
        torch.testing.assert_close(a1[:, :t + 1], a0[:, :t + 1], rtol=0, atol=1e-6)
        torch.testing.assert_close(r1[:, :t + 1], r0[:, :t + 1], rtol=0, atol=1e-6)
        torch.testing.assert_close(e1[:, :t + 1], e0[:, :t + 1], rtol=0, atol=1e-6)
        assert not torch.allclose(v1[:, t + 1:], v0[:, t + 1:])  # later steps do see them
    # ...and the action taken at step t does reach the prediction at step t.
    changed = actions.clone()
    changed[:, 0] = (changed[:, 0] + 1) % 4
    assert not torch.allclose(model(views, changed)[0][:, 0], v0[:, 0])


def test_the_motion_prior_is_a_per_action_local_prior():
    from rpg_worldmodel.models.heads import MoveConv

    model = _model()
    assert isinstance(model.action_conv, MoveConv) and model.view_priors[0] is model.action_conv
    views, actions = _views(2, 3), torch.randint(0, 4, (2, 3))
    other = (actions + 1) % 4
    assert not torch.allclose(model(views, actions)[0], model(views, other)[0])


@pytest.mark.parametrize("reach", [1, 2])
def test_the_motion_prior_holds_a_shift_and_an_inhabitants_own_move_within_its_reach(reach):
    """One motion shifts the view a cell to the left while an inhabitant steps a cell left too, or
    stays: it lands one or two cells left of where it stood, about half and half. Fitted to that, a
    kernel of reach 2 gives each cell its share; one of reach 1 (the default) cannot see two cells
    and leaves the far one near nothing."""
    from rpg_worldmodel.models.heads import MoveConv, conv_for_choice

    torch.manual_seed(0)
    conv = MoveConv(ModelConfig(num_channels=2, motion_reach=reach))
    assert conv.kernel_size == (2 * reach + 1,) * 2
    g = torch.Generator().manual_seed(1)
    n, cols = 256, torch.randint(2, 7, (256,), generator=g)
    rows, step = torch.randint(0, 9, (n,), generator=g), 1 + torch.randint(0, 2, (n,), generator=g)
    views, target = torch.zeros(n, 2, 9, 9), torch.zeros(n, 9, 9, dtype=torch.long)
    views[:, 0] = 1.0
    views[torch.arange(n), 0, rows, cols], views[torch.arange(n), 1, rows, cols] = 0.0, 1.0
    target[torch.arange(n), rows, cols - step] = 1
    optimizer = torch.optim.Adam(conv.parameters(), lr=0.05)
    for _ in range(300):
        logits = conv_for_choice(conv, views, torch.zeros(n, dtype=torch.long))
        loss = F.cross_entropy(logits, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    probs = conv_for_choice(conv, views, torch.zeros(n, dtype=torch.long)).softmax(1)[:, 1]
    at = probs[torch.arange(n), rows]
    near, far = at[torch.arange(n), cols - 1].mean(), at[torch.arange(n), cols - 2].mean()
    one = (step == 1).float().mean()  # the share that landed one cell away
    if reach == 2:
        assert abs(near - one) < 0.03 and abs(far - (1 - one)) < 0.03
    else:
        assert far < 0.05 and near > 0.3


@pytest.mark.parametrize("skips", [False, True])
def test_the_motion_prior_reads_the_views_fixed_cells_only_when_told_to(skips):
    """``model.motion_prior_skips_fixed``: the viewer's own cell (a fixed cell) reads as empty to
    the motion prior, so what it shows moves no logit of the prior; off (older models), it does.
    Other cells count either way."""
    from rpg_worldmodel.models.steps import Steps

    torch.manual_seed(0)
    conv = _model(fixed_cells=(40,), motion_prior_skips_fixed=skips).action_conv
    views = _views(2, 3)
    shifts = torch.randint(0, 9, (2, 3))
    other_centre, other_corner = views.clone(), views.clone()
    other_centre[..., 4, 4] = other_centre[..., 4, 4].roll(1, -1)
    other_corner[..., 0, 0] = other_corner[..., 0, 0].roll(1, -1)

    def prior(v):
        steps = Steps(v, torch.zeros(2, 3, dtype=torch.long), None, shifts, None)
        return conv.add_to(torch.zeros_like(v), steps)

    assert torch.equal(prior(views), prior(other_centre)) is skips
    assert not torch.equal(prior(views), prior(other_corner))


def test_bad_input_shapes_are_refused():
    model = _model()
    with pytest.raises(ValueError, match=r"views must be \(B,T,6,9,9\)"):
        model(_views(2, 3, v=7), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="same B,T"):
        model(_views(2, 3), torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="longer than model.num_frames=4"):
        _model(position="learned")(_views(1, 5), torch.zeros(1, 5, dtype=torch.long))
    assert model(_views(1, 7), torch.zeros(1, 7, dtype=torch.long)).view.shape[1] == 7  # a sliding window


def test_gradients_reach_every_parameter():
    model = _model().train()
    batch = {"views": _views(2, 5), "actions": torch.randint(0, 4, (2, 5)), "rewards": torch.zeros(2, 5),
             "ends": torch.zeros(2, 5, dtype=torch.bool)}
    model.loss(batch)[0].backward()  # the cell refiner learns from the loss alone
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []


def test_input_masks():
    views = _views(4, 3)
    assert apply_input_mask(views, "none", 0.5) is views
    for kind, channel in [("wall", 1), ("gem", 2), ("bone", 3), ("food", 4)]:
        masked = apply_input_mask(views, kind)
        assert masked[:, :, channel].sum() == 0
        keep = [c for c in range(6) if c != channel]
        assert torch.equal(masked[:, :, keep], views[:, :, keep])
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    a = apply_input_mask(views, "random_cells", 0.3, g1)
    assert torch.equal(a, apply_input_mask(views, "random_cells", 0.3, g2))
    hidden = a.sum(2) == 0  # whole cells are hidden, never single channels
    assert ((a.sum(2) == 1) | hidden).all()
    assert 0.2 < hidden.float().mean() < 0.4
    assert apply_input_mask(views, "random_cells", 0.0).equal(views)
    assert mask_choices(vocabulary().cell_names) == ("none", "random_cells", "gem", "bone", "food", "wall")
    with pytest.raises(ValueError, match="unknown mask kind"):
        apply_input_mask(views, "gems")
    with pytest.raises(ValueError, match=r"prob must be in \[0, 1\]"):
        apply_input_mask(views, "random_cells", 1.5)


def test_channel_masks_find_their_channel_by_name():
    assert MASKED_CHANNELS == {"wall": 1, "gem": 2, "bone": 3, "food": 4}  # the game's own order
    shuffled = ["agent", "food", "empty", "gem", "wall", "bone"]
    assert masked_channels(shuffled) == {"gem": 3, "bone": 5, "food": 1, "wall": 4}
    views = _views(2, 3)
    masked = apply_input_mask(views, "gem", channel_names=shuffled)
    assert masked[:, :, 3].sum() == 0 and torch.equal(masked[:, :, 2], views[:, :, 2])
    with pytest.raises(ValueError, match="hides the channel of that name"):
        apply_input_mask(views, "gem", channel_names=["empty", "wall", "ruby", "bone", "food", "agent"])


# ------------------------------------------------------------------------------ loss and groups
def _old_compute_losses(model, batch, mask_kind, generator):
    """The loss as train.compute_losses computed it before it moved into the model (its weights:
    1 for the view, 0.5 for the action, every cell alike), and the motion head's cross-entropy the
    model adds to it now (on the steps whose shift the unmasked views tell)."""
    from rpg_worldmodel.models.motion import infer_shifts
    from rpg_worldmodel.models.steps import cell_kinds

    t = model.cfg.num_frames
    views, actions = batch["views"].float(), batch["actions"]
    inputs = apply_input_mask(views[:, :t], mask_kind, 0.15, generator)
    view_logits, action_logits, *_ = model(inputs, actions[:, :t])
    target_codes = views[:, 1:].argmax(-3)
    cell_ce = F.cross_entropy(view_logits.transpose(1, 2), target_codes, reduction="none")
    weights = torch.ones_like(cell_ce)
    view_loss = (cell_ce * weights).sum() / weights.sum()
    action_ce = F.cross_entropy(action_logits.flatten(0, 1), actions[:, 1:].reshape(-1))
    shifts = infer_shifts(cell_kinds(views))  # (B, T): the shift of each step read, -1: untold
    known = shifts >= 0
    motion_ce = F.cross_entropy(model.motion(inputs, actions[:, :t])[known], shifts[known])
    return 1.0 * view_loss + 0.5 * action_ce, cell_ce.mean(), action_ce, motion_ce


@pytest.mark.parametrize("mask", ["none", "random_cells", "gem"])
def test_loss_is_the_former_training_loss(mask):
    model = _model(reward_head=False, refiner_layers=0)
    batch = {"views": (_views(3, 5) * 1).to(torch.uint8), "actions": torch.randint(0, 4, (3, 5))}
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    mask_fn = None if mask == "none" else lambda v: apply_input_mask(v, mask, 0.15, g1)
    loss, stats = model.loss(batch, mask_fn)
    ref_loss, ref_view_ce, ref_action_ce, ref_motion_ce = _old_compute_losses(model, batch, mask, g2)
    assert ACTION_LOSS_WEIGHT == 0.5 and torch.equal(loss, ref_loss + ref_motion_ce)
    assert torch.equal(stats["motion_ce"], ref_motion_ce)
    assert torch.equal(stats["view_ce"], ref_view_ce) and torch.equal(stats["action_ce"], ref_action_ce)
    assert set(stats) == {"view_ce", "action_ce", "action_acc", "cell_acc", "motion_ce", "motion_acc"}
    assert 0 <= stats["cell_acc"] <= 1 and not stats["cell_acc"].requires_grad


def test_param_groups_decay_matrices_and_kernels_only():
    model = _model()
    decay, no_decay = model.param_groups(0.05)
    assert decay["weight_decay"] == 0.05 and no_decay["weight_decay"] == 0.0
    assert {p.dim() for p in decay["params"]} == {2, 4}
    assert {p.dim() for p in no_decay["params"]} == {1, 3, 5}
    # the memory map's and the extent prior's gates, a scale per cell of the view, are the 5-dimensional ones
    gates = [id(model.memory_map.gate), id(model.extent_prior.gate)]
    assert [id(p) for p in no_decay["params"] if p.dim() == 5] == gates
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    # The same groups, in the same order, as the former rule by name (which decided the runs so far).
    named = list(model.named_parameters())
    old = [p for n, p in named if p.dim() >= 2 and "position" not in n and "temporal" not in n
           and n not in ("memory_map.gate", "extent_prior.gate")]
    assert [id(p) for p in decay["params"]] == [id(p) for p in old]
    # the motion head and the reward head's per-action view map are matrices: decayed
    assert any(p is model.motion.linear.weight for p in decay["params"])
    assert any(p is model.reward_head.by_view.linear.weight for p in decay["params"])
    rank3 = {n for n, p in named if p.dim() == 3}
    # the additive tables (the cell refiner's cells too); rotary positions have none
    assert rank3 == {"embed.patch_position", "refiner.position"}
    first_version = _model(position="learned", refiner_layers=0)
    assert {n for n, p in first_version.named_parameters() if p.dim() == 3} == {
        "embed.patch_position", "embed.temporal"}


def test_the_first_versions_parts_compose_under_its_checkpoints_names():
    from rpg_worldmodel.models.legacy import LearnedPositions, LinearActionHead

    reference = _model(position="learned", reward_head=False, end_head=False, action_frames=0,
                       memory_map=False, extent_prior=False, refiner_layers=0)
    assert isinstance(reference.positions, LearnedPositions) and reference.context_steps == 4
    assert isinstance(reference.action_head, LinearActionHead)
    assert [type(p).__name__ for p in reference.view_priors] == ["MoveConv"]
    assert reference.reward_head is None and not hasattr(reference, "reward_prior")
    # The parts keep the names the first version's checkpoints gave them; the motion head, which
    # every model has now (schema 12), comes after them.
    outside_layers = [k for k in reference.state_dict() if not k.startswith(("blocks.", "embed.conv."))]
    assert outside_layers == [
        "embed.patch_position", "embed.temporal", "embed.patch.weight", "embed.patch.bias",
        "embed.action.weight", "norm_local.weight", "norm_local.bias", "norm_global.weight",
        "norm_global.bias", "patch_in.weight", "patch_in.bias", "global_to_patch.weight",
        "global_to_patch.bias", "view_head.weight", "view_head.bias", "action_head.weight",
        "action_head.bias", "motion.linear.weight", "motion.linear.bias", "action_conv.weight",
        "action_conv.bias"]
    batch = {"views": _views(2, 5), "actions": torch.randint(0, 4, (2, 5)), "rewards": torch.zeros(2, 5)}
    loss, stats = reference.train().loss(batch)
    loss.backward()
    assert "reward_ce" not in stats and reference.embed.temporal.grad.abs().sum() > 0
    default = _model(**MEMORY_MAP)
    assert [type(p).__name__ for p in default.view_priors] == ["MoveConv", "MemoryMap", "ExtentPrior"]
    # the extent prior reads every step since the start; without it the map's reach is the context
    assert default.context_steps == 10**9 and not hasattr(default, "moves")
    assert _model(**MEMORY_MAP, extent_prior=False).context_steps == default.cfg.memory_steps
    assert _model(**MEMORY_MAP, memory_steps=0, extent_prior=False).context_steps == 2 * 3 + 2  # attention


# ------------------------------------------------------------------------------ rewards and imagination
def test_reward_head_reads_the_cell_the_move_enters_and_its_loss_trains():
    model = _model().train()
    views = _views(4, 5)
    actions = torch.randint(0, 4, (4, 5))
    rewards = torch.tensor([-10.0, -1.0, 0.0, 5.0, 10.0])[torch.randint(0, 5, (4, 5))]
    batch = {"views": views.to(torch.uint8), "actions": actions, "rewards": rewards}
    loss, stats = model.loss(batch)
    loss.backward()
    assert {"reward_ce", "reward_acc"} <= set(stats) and stats["reward_ce"] > 0
    assert model.reward_head.mlp[0].weight.grad.abs().sum() > 0
    assert model.reward_head.by_view.linear.weight.grad.abs().sum() > 0
    # every reward a class: the loss is the classes' cross-entropy
    model.eval()
    with torch.no_grad():
        _, stats = model.loss(batch)
        out = model(views[:, :4].float(), actions[:, :4])
    classes = torch.searchsorted(model.reward_values, rewards[:, :4].contiguous())
    want = F.cross_entropy(out.reward.reshape(-1, 5), classes.reshape(-1))
    torch.testing.assert_close(stats["reward_ce"], want, rtol=1e-5, atol=1e-6)
    # a reward between classes (7 points: 0.6 of the 5 class, 0.4 of the 10): their two-hot mix
    with torch.no_grad():
        _, stats = model.loss({**batch, "rewards": torch.full((4, 5), 7.0)})
    log_probs = torch.log_softmax(out.reward, -1)
    want = -(0.6 * log_probs[..., 3] + 0.4 * log_probs[..., 4]).mean()
    torch.testing.assert_close(stats["reward_ce"], want, rtol=1e-5, atol=1e-6)


def test_reward_weights_are_one_class_or_the_two_around_a_reward():
    values = torch.tensor([-10.0, -1.0, 0.0, 5.0, 10.0])
    weights = reward_weights(values, torch.tensor([[5.0, -1.0, 7.0], [-30.0, 20.0, 0.5]]))
    want = torch.zeros(2, 3, 5)
    want[0, 0, 3] = want[0, 1, 1] = want[1, 0, 0] = want[1, 1, 4] = 1.0
    want[0, 2, 3], want[0, 2, 4] = 0.6, 0.4  # 7 = 0.6 x 5 + 0.4 x 10
    want[1, 2, 2], want[1, 2, 3] = 0.9, 0.1
    torch.testing.assert_close(weights, want)
    torch.testing.assert_close((weights[0, 2] * values).sum(), torch.tensor(7.0))
    assert reward_weights(torch.tensor([0.0]), torch.tensor([0.0, 3.0])).tolist() == [[1.0], [1.0]]


@pytest.mark.parametrize("memory", ["map", "none"])
@pytest.mark.parametrize("num_frames", [1, 3])
def test_cached_imagination_equals_the_forward_over_the_whole_history(num_frames, memory):
    extra = MEMORY_MAP if memory == "map" else dict(memory_map=False)
    model = _model(num_frames=num_frames, **extra)
    views, actions = _views(3, 9, seed=4), torch.randint(0, 4, (3, 9))
    reference = model(views, actions)  # a sliding band of num_frames steps over 9 steps
    state = None
    for t in range(9):
        out, state = model.imagine_step(views[:, t], actions[:, t], state)
        for got, want in zip(out, reference, strict=True):
            torch.testing.assert_close(got[:, 0], want[:, t], rtol=1e-4, atol=1e-4)
    assert state.step == 9 and state.past[0][0].shape[2] == 2 * (num_frames - 1)
    # The uncached path over just the steps a prediction depends on agrees too.
    for t in range(1, 9):
        last = model.predict_last(views[:, : t + 1], actions[:, : t + 1])
        for got, want in zip(last, reference, strict=True):
            torch.testing.assert_close(got[:, 0], want[:, t], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("memory", [False, True])
def test_imagination_can_start_from_context_and_splice_worlds(memory):
    model = _model(num_frames=3, **(MEMORY_MAP if memory else {}))
    views, actions = _views(4, 6, seed=2), torch.randint(0, 4, (4, 6))
    state = model.imagine_context(views[:, :4], actions[:, :3])
    out, _ = model.imagine_step(views[:, 3], actions[:, 3], state)
    torch.testing.assert_close(out.view[:, 0], model(views[:, :4], actions[:, :4]).view[:, 3], rtol=1e-4,
                               atol=1e-4)
    # Worlds 1 and 3 restart from other context while 0 and 2 go on: the splice is exact.
    fresh = model.imagine_context(views[[1, 3], 1:5], actions[[1, 3], 1:4], first_step=state.step - 3)
    fresh_state = model.imagine_context(views[[1, 3], 1:5], actions[[1, 3], 1:4])
    mixed = state.with_rows(torch.tensor([1, 3]), fresh)
    out_mixed, _ = model.imagine_step(views[:, 5], actions[:, 5], mixed)
    out_fresh, _ = model.imagine_step(views[[1, 3], 5], actions[[1, 3], 5], fresh_state)
    out_kept, _ = model.imagine_step(views[[0, 2], 5], actions[[0, 2], 5], state.rows(torch.tensor([0, 2])))
    for mixed_out, fresh_out, kept_out in zip(out_mixed, out_fresh, out_kept, strict=True):
        torch.testing.assert_close(mixed_out[[1, 3]], fresh_out, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(mixed_out[[0, 2]], kept_out, rtol=1e-4, atol=1e-4)


def test_learned_positions_imagine_by_recomputing_their_window():
    model = _model(position="learned", num_frames=3)
    views, actions = _views(2, 6, seed=3), torch.randint(0, 4, (2, 6))
    state = None
    for t in range(6):
        out, state = model.imagine_step(views[:, t], actions[:, t], state)
        window = slice(max(0, t - 2), t + 1)
        torch.testing.assert_close(out.view[:, 0], model(views[:, window], actions[:, window]).view[:, -1])


def test_the_action_head_reads_a_policys_frame_stack_with_the_predicted_view():
    """action t+1 from views t-k+2 .. t (zeros before the window) and the predicted view t+1."""
    from rpg_worldmodel.models.steps import frames_before

    model = _model(num_frames=5, action_frames=3)
    views, actions = _views(2, 5, seed=3), torch.randint(0, 4, (2, 5))
    frames = frames_before(views, 3)  # (B, T, k-1, C, V, V)
    assert frames.shape == (2, 5, 2, 6, 9, 9)
    assert torch.equal(frames[:, 0, 0], torch.zeros_like(views[:, 0]))
    assert torch.equal(frames[:, 0, 1], views[:, 0])
    assert torch.equal(frames[:, 3, 0], views[:, 2]) and torch.equal(frames[:, 3, 1], views[:, 3])
    # Views older than the stack reach the action only through the global tokens and the memory
    # map's and the extent prior's on the predicted view; in a model with one-step attention, neither
    # prior and the stack alone they do not reach it at all.
    stack_only = _model(num_frames=1, action_frames=3, memory_map=False, extent_prior=False)
    base = stack_only(views, actions).action
    older = views.clone()
    older[:, 1] = older[:, 1].roll(1, dims=-1)
    changed = stack_only(older, actions).action
    # View 1 is in the stacks of steps 1 and 2 (and in the prediction of view 3, made at step 2).
    assert torch.allclose(changed[:, 3:], base[:, 3:]) and not torch.allclose(changed[:, 2], base[:, 2])
    # The predicted view is detached: the action loss trains the head and the trunk, never the view head.
    out = model(views, actions)
    out.action.sum().backward()
    assert model.view_head.weight.grad is None and model.action_head.cnn[0].weight.grad is not None
    linear = _model(action_frames=0)
    assert isinstance(linear.action_head, torch.nn.Linear)
    assert linear(views[:, :4], actions[:, :4]).action.shape == (2, 4, 4)


@pytest.mark.parametrize("k", [3, 5])
def test_the_fast_unfold_is_torchs_unfold(k):
    from rpg_worldmodel.models.heads import unfold_same

    x = torch.randn(7, 6, 9, 9)
    torch.testing.assert_close(unfold_same(x, k), F.unfold(x, k, padding=k // 2), rtol=0, atol=0)


def test_codes_and_kinds_are_the_set_channel_of_one_hot_views():
    from rpg_worldmodel.models.steps import HIDDEN, cell_kinds, view_codes

    views = _views(4, 3, seed=7)
    views[0, 0, :, 2, 2] = 0  # a hidden cell (a masked input)
    want = views.argmax(2)
    assert torch.equal(view_codes(views), want) and torch.equal(view_codes(views.to(torch.uint8)), want)
    kinds = cell_kinds(views)
    assert kinds[0, 0, 2, 2] == HIDDEN  # the centre is no kind of its own: just what its channel says
    shown = views.amax(2) > 0
    assert torch.equal(kinds[shown], want[shown]) and torch.equal(kinds[..., 4, 4], want[..., 4, 4])
