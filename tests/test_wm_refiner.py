"""The cell refiner: a joint draw of a next view learns which cells go together, keeps what it is
given, is reproducible, and trains beside the view head without changing what the head learns."""

import pytest
import torch
import torch.nn.functional as F

from rpg_base.errors import InputError
from rpg_worldmodel.config import ModelConfig
from rpg_worldmodel.models.refiner import BatchPart, CellRefiner, joint_sample, refiner_loss, truncated
from rpg_worldmodel.models.world_model import WorldModel

V, C, WALL, EMPTY = 9, 6, 1, 0


def _one_kind_world(n: int, generator: torch.Generator) -> torch.Tensor:
    """Views (n, V, V) all wall or all empty, each with probability 1/2: each cell's marginal is
    one half, and a draw is one of these views only if all its cells agree."""
    walls = torch.rand(n, 1, 1, generator=generator) < 0.5
    return torch.where(walls, WALL, EMPTY).expand(n, V, V).clone()


def _agreement(kinds: torch.Tensor) -> torch.Tensor:
    """The mean share of a view's cells (N, V, V) that hold its commonest kind."""
    flat = kinds.flatten(1)
    return (flat == flat.mode(1).values[:, None]).float().mean()


def test_a_trained_refiner_draws_the_cells_together_where_independent_cells_cannot():
    torch.manual_seed(0)
    module = CellRefiner(ModelConfig(refiner_layers=1))
    optimizer = torch.optim.AdamW(module.parameters(), lr=2e-3)
    data = torch.Generator().manual_seed(1)
    marginal = torch.zeros(32, 1, C, V, V)
    marginal[:, :, [WALL, EMPTY]] = 5.0  # the view head's best: each cell wall or empty, 50:50
    for _ in range(150):
        loss = refiner_loss(module, marginal, _one_kind_world(32, data)[:, None], first=0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    logits = torch.zeros(200, V, V, C)
    logits[..., [WALL, EMPTY]] = 5.0
    draws = torch.Generator().manual_seed(2)
    independent = torch.distributions.Categorical(logits=logits).sample()
    with torch.no_grad():
        joint = {rounds: joint_sample(module, logits, draws, rounds) for rounds in (1, V * V)}
    assert _agreement(independent) < 0.6  # 81 fair coins: about half of them either way
    # one round draws every cell knowing none of the others; one cell a round, each knows the rest
    assert _agreement(joint[1]) < 0.75
    assert _agreement(joint[V * V]) > 0.85


class _Conditionals(torch.nn.Module):
    """A stand-in refiner given by its ``conditionals(logits, drawn)`` (M, L, C), asked as
    `CellRefiner` is asked: for every cell, or for ``cells`` (M, K) alone."""

    def forward(self, logits: torch.Tensor, drawn: torch.Tensor, cells: torch.Tensor | None = None
                ) -> torch.Tensor:
        every = self.conditionals(logits, drawn)
        return every if cells is None else every.gather(1, cells[..., None].expand(-1, -1, every.shape[-1]))


class _AllOrNothing(_Conditionals):
    """The conditionals of the one-kind world, exactly: the view head's marginal while no cell is
    drawn, the kind of the drawn cells once one is (what a perfectly trained refiner gives)."""

    def conditionals(self, logits: torch.Tensor, drawn: torch.Tensor) -> torch.Tensor:
        wall, empty = (drawn == WALL).any(1), (drawn == EMPTY).any(1)
        known = torch.full_like(logits, -30.0)
        known[..., WALL] = torch.where(wall, 30.0, -30.0)[:, None]
        known[..., EMPTY] = torch.where(empty, 30.0, -30.0)[:, None]
        return torch.where((wall | empty)[:, None, None], known, logits)


def test_the_likeliest_view_is_decided_jointly_where_each_cells_arg_max_is_not():
    from rpg_worldmodel.models.sampling import ViewSampler

    # each cell leans a little to wall or to empty, in a pattern: the one-kind world holds no such view
    lean = torch.randn(4, V, V, generator=torch.Generator().manual_seed(3))
    logits = torch.zeros(4, V, V, C)
    logits[..., WALL], logits[..., EMPTY] = 5.0 + 0.1 * lean, 5.0 - 0.1 * lean
    alone = ViewSampler().likeliest(logits)
    assert torch.equal(alone, logits.argmax(-1)) and _agreement(alone) < 0.75
    for rounds, doubt in ((V * V, 0.0), (32, 0.2)):
        joint = ViewSampler(_AllOrNothing(), rounds, doubt).likeliest(logits)
        assert _agreement(joint) == 1.0  # the surest cell decides, and every other follows it
        surest = lean.flatten(1).abs().argmax(1)
        decided = torch.where(lean.flatten(1).gather(1, surest[:, None])[:, 0] > 0, WALL, EMPTY)
        assert torch.equal(joint[:, 0, 0], decided)
        assert torch.equal(joint, ViewSampler(_AllOrNothing(), rounds, doubt).likeliest(logits))


@pytest.mark.parametrize(("rounds", "doubt"), [(V * V, 0.0), (8, 0.0), (32, 0.2), (2, 0.2)])
def test_the_draw_order_does_not_bias_what_is_drawn(rounds, doubt):
    """With exact conditionals, a draw that takes the doubtful cells one at a time gives whole
    views, half of them walls; a slight lean of the marginal towards walls stays slight. (Keeping
    the cells whose drawn value was likeliest, MaskGIT's rule, would turn a 51:49 lean into all
    walls.)"""
    logits = torch.full((2000, V, V, C), -30.0)
    logits[..., [WALL, EMPTY]] = torch.tensor([0.04, 0.0])  # 51:49
    kinds = joint_sample(_AllOrNothing(), logits, torch.Generator().manual_seed(0), rounds, doubt=doubt)
    walls = (kinds == WALL).flatten(1).float().mean(1)
    assert ((walls == 0) | (walls == 1)).all()  # the first cell decides, the rest are then sure
    assert 0.46 < walls.mean() < 0.56


class _CountedMarginals(_Conditionals):
    """A refiner that refines nothing (each cell keeps its marginal) and records how many worlds
    each pass was given."""

    def __init__(self):
        super().__init__()
        self.passes: list[int] = []

    def conditionals(self, logits: torch.Tensor, drawn: torch.Tensor) -> torch.Tensor:
        self.passes.append(len(logits))
        return logits


def test_the_doubt_budget_takes_sure_cells_together_and_doubtful_ones_one_at_a_time():
    """Each round keeps the surest open cells while their summed doubt stays within the budget:
    a view of sure cells is drawn in one pass, a view of 81 fair coins in one pass per coin, and a
    world whose view is complete takes no further pass; ``rounds`` caps the passes."""
    identity = _CountedMarginals()
    logits = torch.full((2, V, V, C), -30.0)
    logits[0, ..., EMPTY] = 30.0  # sure: every cell empty
    logits[1, ..., [WALL, EMPTY]] = 0.0  # every cell a fair coin
    kinds = joint_sample(identity, logits, torch.Generator().manual_seed(0), V * V, doubt=0.2)
    assert (kinds[0] == EMPTY).all() and set(kinds[1].unique().tolist()) == {WALL, EMPTY}
    assert identity.passes == [2] + [1] * (V * V - 1)  # the sure world left after the first pass
    identity.passes.clear()
    joint_sample(identity, logits, torch.Generator().manual_seed(0), 3, doubt=0.2)
    assert identity.passes == [2, 1, 1]  # capped: the third round took every cell still open
    identity.passes.clear()
    coins = joint_sample(identity, logits[1:], torch.Generator().manual_seed(0), V * V, doubt=2.0)
    # four coins a round (doubt 0.5 each), fewer where one falls to its less likely side (a surprise
    # ends the round: `_kept_in_order`): between 81 / 4, rounded up, and one a round
    assert 21 <= len(identity.passes) < V * V
    assert 0.35 < (coins == WALL).float().mean() < 0.65


@pytest.mark.parametrize("doubt", [0.2, 2.0])
def test_a_surprise_ends_its_round_so_the_cells_after_it_are_drawn_knowing_it(doubt):
    """Views all wall (0.99) or all empty: each cell's doubt is 0.01, so a round takes 20 or more
    cells at once. Drawn independently, one round in six would hold a lone empty cell among walls.
    A surprise (a cell drawn as its less likely kind) ends its round: first in the round, it is
    kept and the rest are drawn again knowing it; later, it waits, and judged given the walls
    before it, it stands with probability p / q = 0. Every view is one kind, empty as often as the
    first cell's draw makes it (0.01)."""
    logits = torch.full((4000, V, V, C), -30.0)
    logits[..., WALL], logits[..., EMPTY] = 0.0, -torch.log(torch.tensor(99.0))
    kinds = joint_sample(_AllOrNothing(), logits, torch.Generator().manual_seed(0), 32, doubt=doubt)
    walls = (kinds == WALL).flatten(1).float().mean(1)
    assert ((walls == 0) | (walls == 1)).all()
    assert 0.004 < (walls == 0).float().mean() < 0.016
    independent = joint_sample(_AllOrNothing(), logits, torch.Generator().manual_seed(0), 1)
    mixed = (independent == EMPTY).flatten(1).any(1) & (independent == WALL).flatten(1).any(1)
    assert mixed.float().mean() > 0.45


def test_the_floor_leaves_out_the_tails_and_draws_the_rest_in_proportion():
    """A cell whose refined distribution gives a wall 0.0005, an item 0.01 and empty the rest never
    draws the wall with a floor of 0.001, and still draws the item at its own rate; without the
    floor the draw is the distribution as it is. A floor never leaves a cell without a kind."""
    probs = torch.tensor([0.9895, 0.0005, 0.01, 0.0, 0.0, 0.0])
    assert torch.equal(truncated(probs, 0.0), probs)
    kept = truncated(probs, 0.001)
    torch.testing.assert_close(kept, torch.tensor([0.9895, 0.0, 0.01, 0.0, 0.0, 0.0]) / 0.9995)
    flat = torch.full((3, C), 1 / C)
    assert torch.equal(truncated(flat, 0.5), flat)  # all tied at the top: every kind stays
    logits = probs.log().expand(400, V, V, C)
    draws = {f: joint_sample(_CountedMarginals(), logits, torch.Generator().manual_seed(0), 1, floor=f)
             for f in (0.0, 0.001)}
    cells = V * V * 400
    assert (draws[0.0] == WALL).sum() > 0 and (draws[0.001] == WALL).sum() == 0  # 16 walls expected at 0
    for kinds in draws.values():
        assert abs(float((kinds == 2).sum()) / cells - 0.01) < 0.002


def test_a_joint_draw_keeps_its_given_cells_and_is_reproducible():
    torch.manual_seed(0)
    module = CellRefiner(ModelConfig(refiner_layers=1)).eval()
    logits = torch.randn(5, V, V, C)
    fixed = torch.full((5, V, V), C)
    fixed[:, 4, 4] = 5
    fixed[0, 0] = WALL
    with torch.no_grad():
        for rounds in (1, 3, 8, V * V):
            a = joint_sample(module, logits, torch.Generator().manual_seed(3), rounds, fixed=fixed)
            b = joint_sample(module, logits, torch.Generator().manual_seed(3), rounds, fixed=fixed)
            assert torch.equal(a, b) and a.shape == (5, V, V) and a.dtype == torch.long
            assert (a[:, 4, 4] == 5).all() and (a[0, 0] == WALL).all()
            assert ((a >= 0) & (a < C)).all()
        # one cold round: the refined arg-max, given the fixed cells
        cold = joint_sample(module, logits, torch.Generator().manual_seed(3), 1, temperature=1e-4,
                            fixed=fixed)
        refined = module(logits.reshape(5, V * V, C), fixed.reshape(5, V * V)).argmax(-1).view(5, V, V)
        open_ = fixed == C
        assert torch.equal(cold[open_], refined[open_])


def test_the_refiner_computes_its_encoder_layers_and_narrows_only_the_last_ones_queries():
    """`CellRefiner` runs its nn.TransformerEncoder's weights itself: the same function as the
    encoder (so a checkpoint's weights mean what they meant), and asked for some cells (a draw asks
    for its open ones) each gets the logits it gets when every cell is asked for."""
    torch.manual_seed(0)
    module = CellRefiner(ModelConfig(refiner_layers=2)).eval()
    logits = torch.randn(7, V * V, C)
    drawn = torch.where(torch.rand(7, V * V) < 0.5, torch.randint(0, C, (7, V * V)), C)
    with torch.no_grad():
        x = module.marginal(torch.log_softmax(logits, -1)) + module.drawn(drawn) + module.position
        by_encoder = logits + module.out(module.norm(module.layers(x)))
        every = module(logits, drawn)
        cells = torch.argsort(torch.rand(7, V * V), 1)[:, :5]
        some = module(logits, drawn, cells)
    assert torch.allclose(every, by_encoder, atol=1e-5)
    assert some.shape == (7, 5, C)
    assert torch.allclose(some, every.gather(1, cells[..., None].expand(-1, -1, C)), atol=1e-5)


def test_the_refiner_trains_beside_the_view_head_without_changing_its_gradients():
    batch = {"views": F.one_hot(torch.randint(0, C, (2, 5, V, V)), C).permute(0, 1, 4, 2, 3).float(),
             "actions": torch.randint(0, 4, (2, 5)), "rewards": torch.zeros(2, 5),
             "ends": torch.zeros(2, 5, dtype=torch.bool)}
    grads = {}
    for layers in (0, 1):
        torch.manual_seed(0)
        model = WorldModel(ModelConfig(width=24, num_heads=2, num_frames=4, refiner_layers=layers,
                                       reward_values=(-1.0, 0.0, 1.0))).train()
        loss, stats = model.loss(batch)
        loss.backward()
        grads[layers] = {n: p.grad.clone() for n, p in model.named_parameters()
                         if not n.startswith("refiner.")}
        if layers:
            assert stats["refiner_ce"] > 0
            assert all(p.grad is not None for p in model.refiner.parameters())
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], msg=name)


def _refiner_grads(module: CellRefiner, loss: torch.Tensor) -> list[torch.Tensor]:
    module.zero_grad()
    loss.backward()
    return [p.grad.clone() for p in module.parameters()]


@pytest.mark.parametrize("views", [256, 2])
def test_slices_of_a_global_batch_give_the_refiner_loss_of_the_whole(views):
    """Under torchrun each process scores its rows of the draws made for the global batch
    (`BatchPart`, every process's generator in one state): the mean of the slices' losses and
    gradients is one process's on the whole batch from that state (what DDP averages). With 2 views
    drawn among 8 rows some slice has none: it scores 0 and still gives every weight a gradient."""
    torch.manual_seed(0)
    module = CellRefiner(ModelConfig(refiner_layers=1)).train()
    logits, targets = torch.randn(8, 6, C, V, V), torch.randint(0, C, (8, 6, V, V))
    torch.manual_seed(5)
    whole = refiner_loss(module, logits, targets, first=2, views=views)
    expected = _refiner_grads(module, whole)
    losses, grads = [], []
    for first in range(0, 8, 2):
        part = BatchPart(first, 8, torch.Generator().manual_seed(5))
        loss = refiner_loss(module, logits[first : first + 2], targets[first : first + 2], 2, views, part)
        losses.append(loss.detach())
        grads.append(_refiner_grads(module, loss))
    torch.testing.assert_close(torch.stack(losses).mean(), whole.detach())
    for i, grad in enumerate(expected):
        torch.testing.assert_close(torch.stack([g[i] for g in grads]).mean(0), grad)
    assert (min(losses) == 0) == (views == 2)


def test_bad_refiner_settings_are_refused(tiny_world_model):
    import gymnasium as gym

    from rpg_base.typed_config.values import ConfigError
    from rpg_worldmodel import IMAGINED_ENV_ID

    with pytest.raises(ConfigError, match="sample_rounds must be in 1..81"):
        ModelConfig(sample_rounds=0).validate()
    with pytest.raises(InputError, match="sample_rounds must be an int in 1..81"):
        gym.make_vec(IMAGINED_ENV_ID, num_envs=1, checkpoint=tiny_world_model[0], sample_rounds=82)
    with pytest.raises(ConfigError, match="model.refiner_layers must be >= 0"):
        ModelConfig(refiner_layers=-1).validate()
    for doubt in (-0.1, True, "0.2", float("nan")):
        with pytest.raises(InputError, match="sample_doubt must be a number >= 0"):
            gym.make_vec(IMAGINED_ENV_ID, num_envs=1, checkpoint=tiny_world_model[0], sample_doubt=doubt)
    with pytest.raises(ConfigError, match=r"sample_floor must be a probability in \[0, 1\)"):
        ModelConfig(sample_floor=1.0).validate()
    for floor in (-0.001, 1.0, True, "0.001", float("nan")):
        with pytest.raises(InputError, match=r"sample_floor must be a probability in \[0, 1\)"):
            gym.make_vec(IMAGINED_ENV_ID, num_envs=1, checkpoint=tiny_world_model[0], sample_floor=floor)
