"""Numerics that cannot blow up: the clamped PPO log-ratio, the whitening σ floor, token vs sequence mean."""
import pytest
import torch

from mappa_train import algo


@pytest.mark.parametrize("log_ratio", [10.0, 95.0, float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_stale_or_corrupted_old_logprobs_give_finite_loss_and_grads(log_ratio, advantage):
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    old = logp.detach().clone()
    old[0, 1] = logp[0, 1].detach() - log_ratio  # one corrupted old log-prob; exp(95) overflows fp32
    adv, mask = torch.full((1, 3), advantage), torch.ones(1, 3)
    loss = algo.ppo_clip_loss(logp, old, adv, mask)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(logp.grad).all()
    if abs(log_ratio) > algo.MAX_LOG_RATIO:  # clamped: that token gets no gradient, the others keep theirs
        assert logp.grad[0, 1] == 0
        assert (logp.grad[0, [0, 2]] != 0).all()


def test_the_clamp_leaves_ordinary_ratios_alone():
    logp, old = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.1, -1.9]])
    adv, mask = torch.tensor([[1.0, -1.0]]), torch.ones(1, 2)
    ratio = torch.exp(logp - old)
    expected = -torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
    assert torch.allclose(algo.ppo_clip_loss(logp, old, adv, mask), expected)


def test_equal_coach_scores_give_bounded_advantages():
    torch.manual_seed(0)
    mask = torch.ones(64, 20)
    old = torch.randn(64, 20)
    ref = old + 1e-4 * torch.randn(64, 20)  # a whisper of KL: all that tells the returns apart (σ ~ 1e-6)
    reward = torch.full((64,), 7.0)  # every action scored 7
    for floor in (1e-4, 1e-12):  # no reward spread: nothing is whitened, whatever the floor
        adv = algo.advantages(old, ref, mask, reward, std_floor=floor)
        assert adv.abs().max() < 1e-4  # the whisper at its own size, not blown up to unit size
    returns = algo.returns_to_go(algo.token_rewards(reward, old - ref, mask), mask)
    assert algo.whiten(returns, mask, std_floor=1e-12).abs().max() > 1  # what deciding by the rewards prevents
    varied = algo.advantages(old, ref, mask, torch.arange(64.0))  # real differences are whitened as before
    assert abs(float(varied[mask.bool()].std(unbiased=False)) - 1) < 1e-3


def test_weights_in_the_mask_make_a_sequence_mean():
    logp = torch.tensor([[-1.0, -1.0, -1.0, -1.0], [-2.0, 0.0, 0.0, 0.0]])
    adv = torch.tensor([[1.0, 1.0, 1.0, 1.0], [3.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1, 1, 1], [1, 0, 0, 0]])
    # ratio 1: the surrogate is -A per token. token mean: (4*1 + 3) / 5; sequence mean: (1 + 3) / 2
    assert algo.ppo_clip_loss(logp, logp, adv, mask) == pytest.approx(-7 / 5)
    per_sequence = mask / mask.sum(1, keepdim=True)
    assert algo.ppo_clip_loss(logp, logp, adv, per_sequence, n_tokens=2) == pytest.approx(-2.0)
