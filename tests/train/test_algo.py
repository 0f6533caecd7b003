"""mappa_train.algo against tensors worked out by hand."""
import math

import pytest
import torch

from mappa_train import algo

# two actions: row 0 has prompt (2 tokens) + 3 action tokens; row 1 has 1 prompt token + 2 action tokens + 2 pad
MASK = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 0, 0]], dtype=torch.float32)


def test_kl_k1_is_logp_difference():
    logp = torch.tensor([[-1.0, -2.0]])
    ref = torch.tensor([[-1.5, -1.0]])
    assert torch.allclose(algo.kl_k1(logp, ref), torch.tensor([[0.5, -1.0]]))


def test_kl_k3_is_nonnegative_and_zero_at_equality():
    logp = torch.tensor([[-1.0, -2.0, -0.3]])
    ref = torch.tensor([[-1.5, -1.0, -0.3]])
    k3 = algo.kl_k3(logp, ref)
    assert torch.allclose(k3, torch.tensor([[math.exp(-0.5) + 0.5 - 1, math.exp(1.0) - 1.0 - 1, 0.0]]))


def test_last_token_mask():
    expected = torch.tensor([[0, 0, 0, 0, 1], [0, 0, 1, 0, 0]], dtype=torch.float32)
    assert torch.equal(algo.last_token_mask(MASK), expected)


def test_token_rewards_coach_on_last_token_kl_on_action_tokens_only():
    kl = torch.tensor([[9.0, 9.0, 1.0, 2.0, 3.0], [9.0, -1.0, 4.0, 9.0, 9.0]])
    r = algo.token_rewards(torch.tensor([7.0, 2.0]), kl, MASK, beta=0.1)
    expected = torch.tensor([[0, 0, -0.1, -0.2, -0.3 + 7.0], [0, 0.1, -0.4 + 2.0, 0, 0]])
    assert torch.allclose(r, expected)


def test_returns_to_go_within_row():
    r = torch.tensor([[0, 0, 1.0, 2.0, 3.0], [0, 5.0, 7.0, 100.0, 100.0]])  # pad rewards are ignored
    expected = torch.tensor([[0, 0, 6.0, 5.0, 3.0], [0, 12.0, 7.0, 0, 0]])
    assert torch.allclose(algo.returns_to_go(r, MASK), expected)


def test_returns_to_go_episode_and_agent_scopes():
    # one episode, three actions in order: solver (order 0), executor (1), solver again (2)
    mask = torch.ones(3, 2)
    r = torch.tensor([[1.0, 2.0], [10.0, 20.0], [100.0, 200.0]])
    within = torch.tensor([[3.0, 2.0], [30.0, 20.0], [300.0, 200.0]])
    order = torch.tensor([0, 1, 2])
    episode = torch.tensor([0, 0, 0])
    agent = torch.tensor([0, 1, 0])
    assert torch.allclose(algo.returns_to_go(r, mask), within)
    # "episode": every later action's total is added
    assert torch.allclose(algo.returns_to_go(r, mask, episode, order), within + torch.tensor([[330.0], [300.0], [0.0]]))
    # "agent": only the same agent's later actions (row 0 gets row 2's 300, row 1 gets nothing)
    group = episode * 2 + agent
    assert torch.allclose(algo.returns_to_go(r, mask, group, order), within + torch.tensor([[300.0], [0.0], [0.0]]))
    # rows of another episode never leak in
    r2, m2 = torch.cat([r, r]), torch.ones(6, 2)
    ep2, ord2 = torch.tensor([0, 0, 0, 1, 1, 1]), torch.cat([order, order])
    out = algo.returns_to_go(r2, m2, ep2, ord2)
    assert torch.allclose(out[:3], out[3:])


def test_whiten_global_over_masked_entries():
    x = torch.tensor([[9.0, 1.0, 2.0], [3.0, 99.0, 99.0]])
    mask = torch.tensor([[0, 1, 1], [1, 0, 0]], dtype=torch.float32)
    # masked values 1, 2, 3: mean 2, population std sqrt(2/3)
    s = math.sqrt(2 / 3)
    expected = torch.tensor([[0.0, -1 / s, 0.0], [1 / s, 0.0, 0.0]])
    assert torch.allclose(algo.whiten(x, mask), expected, atol=1e-6)


def test_whiten_per_role_differs_from_global():
    x = torch.tensor([[1.0, 3.0], [10.0, 30.0]])
    mask = torch.ones(2, 2)
    per_role = algo.whiten(x, mask, group=torch.tensor([0, 1]))
    assert torch.allclose(per_role, torch.tensor([[-1.0, 1.0], [-1.0, 1.0]]), atol=1e-6)
    glob = algo.whiten(x, mask)
    mean, std = x.mean(), x.std(unbiased=False)
    assert torch.allclose(glob, (x - mean) / std, atol=1e-6)


def test_ppo_clip_loss_unclipped_and_clipped_on_both_sides():
    mask = torch.ones(1, 1)
    lp = lambda ratio: torch.tensor([[math.log(ratio)]])  # noqa: E731
    old = torch.zeros(1, 1)
    pos, neg = torch.ones(1, 1), -torch.ones(1, 1)
    # inside the trust region: loss = -ratio * A
    assert algo.ppo_clip_loss(lp(1.1), old, pos, mask).item() == pytest.approx(-1.1)
    # A > 0, ratio above 1+eps: clipped at 1.2 (no gradient)
    logp = lp(1.5).requires_grad_()
    loss = algo.ppo_clip_loss(logp, old, pos, mask)
    loss.backward()
    assert loss.item() == pytest.approx(-1.2)
    assert logp.grad.item() == 0.0
    # A > 0, ratio below 1-eps: min picks the unclipped ratio, gradient flows
    logp = lp(0.5).requires_grad_()
    loss = algo.ppo_clip_loss(logp, old, pos, mask)
    loss.backward()
    assert loss.item() == pytest.approx(-0.5)
    assert logp.grad.item() == pytest.approx(-0.5)
    # A < 0, ratio below 1-eps: clipped at 0.8 (no gradient)
    logp = lp(0.5).requires_grad_()
    loss = algo.ppo_clip_loss(logp, old, neg, mask)
    loss.backward()
    assert loss.item() == pytest.approx(0.8)
    assert logp.grad.item() == 0.0
    # A < 0, ratio above 1+eps: unclipped (pessimistic), gradient flows
    assert algo.ppo_clip_loss(lp(1.5), old, neg, mask).item() == pytest.approx(1.5)


def test_ppo_clip_loss_is_masked_token_mean_and_splits_into_microbatches():
    logp = torch.tensor([[0.0, 0.1, 0.2], [0.0, -0.1, 5.0]])
    old = torch.zeros(2, 3)
    adv = torch.tensor([[0.0, 1.0, 2.0], [0.0, 3.0, 99.0]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 0]], dtype=torch.float32)
    r = [math.exp(0.1), math.exp(0.2), math.exp(-0.1)]
    expected = -(r[0] * 1 + min(r[1], 1.2) * 2 + r[2] * 3) / 3
    full = algo.ppo_clip_loss(logp, old, adv, mask)
    assert full.item() == pytest.approx(expected)
    parts = sum(algo.ppo_clip_loss(logp[i:i + 1], old[i:i + 1], adv[i:i + 1], mask[i:i + 1], n_tokens=3)
                for i in range(2))
    assert parts.item() == pytest.approx(expected)


def test_advantages_composes_the_steps():
    old = torch.tensor([[0.0, -1.0, -2.0], [0.0, -1.0, 0.0]])
    ref = torch.tensor([[0.0, -1.5, -1.0], [0.0, -1.0, 0.0]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 0]], dtype=torch.float32)
    reward = torch.tensor([1.0, 0.0])
    kl = old - ref
    rewards = algo.token_rewards(reward, kl, mask, beta=0.01)
    expected = algo.whiten(algo.returns_to_go(rewards, mask), mask)
    assert torch.allclose(algo.advantages(old, ref, mask, reward), expected)
    # kl_in_loss keeps the KL out of the reward
    no_kl = algo.whiten(algo.returns_to_go(algo.token_rewards(reward, kl, mask, beta=0.0), mask), mask)
    assert torch.allclose(algo.advantages(old, ref, mask, reward, kl_in_loss=True), no_kl)
    with pytest.raises(ValueError, match="scope"):
        algo.advantages(old, ref, mask, reward, scope="turn")
    with pytest.raises(ValueError, match="episode and order"):
        algo.advantages(old, ref, mask, reward, scope="episode")


# ---- the advantage normalisations, on one batch worked out by hand -------------------------------
# four actions: role 0 (two actions on task 0, one on task 1), role 1 (one action on task 0).
# Row 0 has two action tokens, the others one; returns are 1,1 | 3 | 5 | 10.
NX = torch.tensor([[1.0, 1.0], [3.0, 0.0], [5.0, 0.0], [10.0, 0.0]])
NMASK = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
ROLE, TURN, TASK = torch.tensor([0, 0, 0, 1]), torch.tensor([0, 1, 0, 0]), torch.tensor([0, 0, 1, 0])


def test_normalize_global_uses_every_action_token():
    # tokens 1, 1, 3, 5, 10: mean 4, population variance (9+9+1+1+36)/5 = 11.2
    s = math.sqrt(11.2)
    expected = torch.tensor([[-3 / s, -3 / s], [-1 / s, 0.0], [1 / s, 0.0], [6 / s, 0.0]])
    assert torch.allclose(algo.normalize_global(NX, NMASK), expected, atol=1e-6)
    assert torch.allclose(algo.normalize(NX, NMASK, "global"), expected, atol=1e-6)


def test_normalize_per_role_uses_each_roles_tokens():
    # role 0 tokens 1, 1, 3, 5: mean 2.5, variance (2.25+2.25+0.25+6.25)/4 = 2.75; role 1 alone: 0
    s = math.sqrt(2.75)
    expected = torch.tensor([[-1.5 / s, -1.5 / s], [0.5 / s, 0.0], [2.5 / s, 0.0], [0.0, 0.0]])
    assert torch.allclose(algo.normalize_per_role(NX, NMASK, ROLE), expected, atol=1e-6)
    assert torch.allclose(algo.normalize(NX, NMASK, "per_role", role=ROLE), expected, atol=1e-6)


def test_normalize_per_role_turn_compares_samples_of_the_same_decision():
    # groups (task, role, turn): rows 0 and 1 differ in turn, rows 0 and 2 in task: every group is one row
    # except when two samples share all three; add a second sample of row 1's decision to see it work
    x = torch.cat([NX, torch.tensor([[7.0, 0.0]])])
    mask = torch.cat([NMASK, torch.tensor([[1.0, 0.0]])])
    role, turn, task = (torch.cat([v, torch.tensor([w])]) for v, w in ((ROLE, 0), (TURN, 1), (TASK, 0)))
    out = algo.normalize_per_role_turn(x, mask, task, role, turn)
    # rows 1 and 4 (returns 3 and 7): mean 5, std 2 -> -1 and +1; every other group has one member: no
    # reward spread, so x − μ unscaled, 0 here (one token, or row 0's two equal ones)
    expected = torch.tensor([[0.0, 0.0], [-1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    assert torch.allclose(out, expected, atol=1e-6)
    with pytest.raises(ValueError, match="turn and task"):
        algo.normalize(x, mask, "per_role_turn", role=role)


def test_whiten_unit_action_gives_two_samples_of_one_decision_opposite_advantages():
    # one decision, two samples: a right one of 1 token (return 1) and a wrong one of 3 (return 0)
    x = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    group = role = turn = torch.zeros(2, dtype=torch.long)  # one task, one role, one position
    # tokens: mean (1 + 0 + 0 + 0)/4 = 0.25, variance (0.5625 + 3·0.0625)/4 = 0.1875: the tokens the two share
    # (their first, the action's format) get 1.732 − 0.577 > 0, a push toward the shorter one's sign
    s = math.sqrt(0.1875)
    by_token = algo.normalize(x, mask, "per_role_turn", role=role, turn=turn, task=group)
    assert torch.allclose(by_token, torch.tensor([[0.75 / s, 0, 0], [-0.25 / s] * 3]), atol=1e-6)
    # actions: mean 0.5, σ 0.5: +1 and −1, so a token both share nets 0 whatever the lengths
    by_action = algo.normalize(x, mask, "per_role_turn", role=role, turn=turn, task=group, unit="action")
    assert torch.allclose(by_action, torch.tensor([[1.0, 0, 0], [-1.0] * 3]), atol=1e-6)
    assert torch.allclose(algo.normalize(x, mask, "per_role", role=role, unit="action"), by_action)
    assert torch.allclose(algo.normalize(x, mask, "global", unit="action"), by_action)
    assert torch.allclose(algo.normalize(x, mask, "per_agent", role=role, unit="token"), by_action)  # always actions
    reward = torch.tensor([1.0, 0.0])
    got = algo.advantages(torch.zeros(2, 3), torch.zeros(2, 3), mask, reward, normalization="per_role_turn",
                          agent=role, turn=turn, task=group, unit="action")
    assert torch.allclose(got, by_action, atol=1e-6)
    with pytest.raises(ValueError, match="whiten_unit must be one of"):
        algo.normalize(x, mask, "global", unit="tokens")


def test_normalize_per_agent_counts_each_action_once():
    # agent 0's actions have returns 1 (row 0's first token), 3, 5: mean 3, variance 8/3
    # (per role, row 0's two tokens made the mean 2.5); agent 1 alone: 0
    s = math.sqrt(8 / 3)
    expected = torch.tensor([[-2 / s, -2 / s], [0.0, 0.0], [2 / s, 0.0], [0.0, 0.0]])
    assert torch.allclose(algo.normalize_per_agent(NX, NMASK, ROLE), expected, atol=1e-6)
    assert torch.allclose(algo.normalize(NX, NMASK, "per_agent", role=ROLE), expected, atol=1e-6)
    with pytest.raises(ValueError, match="needs role ids"):
        algo.normalize(NX, NMASK, "per_agent")


def test_advantages_selects_the_normalisation():
    old = torch.zeros(4, 2)
    reward = torch.tensor([1.0, 3.0, 5.0, 10.0])
    rtg = algo.returns_to_go(algo.token_rewards(reward, old, NMASK, beta=0.0), NMASK)
    got = algo.advantages(old, old, NMASK, reward, normalization="per_agent", agent=ROLE, turn=TURN, task=TASK)
    assert torch.allclose(got, algo.normalize_per_agent(rtg, NMASK, ROLE))
    with pytest.raises(ValueError, match="one of"):
        algo.advantages(old, old, NMASK, reward, normalization="per_task", agent=ROLE)


# ---- no reward spread, no whitening: the KL is not turned into a signal ---------------------------
# three actions of 2, 3 and 1 tokens; k1 KL per token chosen by hand; β = 0.01
KMASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
KL = torch.tensor([[0.5, 0.25, 0.0], [1.0, 0.0, 2.0], [-0.5, 0.0, 0.0]])
OLD = torch.zeros(3, 3)
REF = OLD - KL  # kl_k1 = old − ref = KL


def _kl_returns(beta=0.01):
    # −β · Σ_{j≥i} kl_j within each row: [-.0075, -.0025 | -.03, -.02, -.02 | .005]
    return algo.returns_to_go(-beta * KL * KMASK, KMASK)


def test_an_all_fail_batch_gets_the_kl_at_its_own_size_not_unit_variance():
    reward = torch.full((3,), 0.2)  # every action scored 2 (× reward_scale 0.1): no reward signal
    adv = algo.advantages(OLD, REF, KMASK, reward)
    kl_ret = _kl_returns()
    m = KMASK.bool()
    expected = torch.where(m, kl_ret, 0.0)  # the reward part is 0, the KL part unscaled and not centred
    assert torch.allclose(adv, expected, atol=1e-7)
    assert float(adv[m].std(unbiased=False)) < 0.02  # β-sized; whitening the returns made it exactly 1
    returns = algo.returns_to_go(algo.token_rewards(reward, KL, KMASK), KMASK)
    assert float(algo.whiten(returns, KMASK)[m].std(unbiased=False)) == pytest.approx(1.0, abs=1e-4)
    # with the KL in the loss there is nothing left: exactly zero
    assert torch.equal(algo.advantages(OLD, REF, KMASK, reward, kl_in_loss=True), torch.zeros(3, 3))


def test_a_reward_spread_below_the_floor_is_no_signal_and_above_it_is_whitened():
    m = KMASK.bool()
    below = algo.advantages(OLD, REF, KMASK, torch.tensor([0.2, 0.2, 0.2 + 1e-5]))  # σ ≈ 5e-6 < 1e-4
    assert float(below[m].std(unbiased=False)) < 0.02
    reward = torch.tensor([0.2, 0.2, 0.9])  # a real difference: the reference formula, KL included
    returns = algo.returns_to_go(algo.token_rewards(reward, KL, KMASK), KMASK)
    expected = (returns - returns[m].mean()) / returns[m].std(unbiased=False)
    assert torch.allclose(algo.advantages(OLD, REF, KMASK, reward), torch.where(m, expected, 0.0), atol=1e-6)
    # the floor is in reward units: a spread of 0.05 is a signal at floor 1e-4 and none at floor 0.1
    spread = torch.tensor([0.2, 0.25, 0.2])
    assert float(algo.advantages(OLD, REF, KMASK, spread)[m].std(unbiased=False)) == pytest.approx(1.0, abs=1e-4)
    assert float(algo.advantages(OLD, REF, KMASK, spread, std_floor=0.1)[m].std(unbiased=False)) < 0.05


@pytest.mark.parametrize("how", ["per_role", "per_agent"])
def test_per_role_a_role_without_spread_gets_no_advantage_the_other_is_whitened_as_before(how):
    mask = torch.cat([KMASK, torch.tensor([[1.0, 1.0, 0.0]])])
    kl = torch.cat([KL, torch.tensor([[0.0, 0.5, 0.0]])])
    old, ref = torch.zeros(4, 3), -kl
    role = torch.tensor([0, 0, 1, 1])
    reward = torch.tensor([0.2, 0.2, 0.3, 0.9])  # role 0: both actions scored 2; role 1: 3 and 9
    adv = algo.advantages(old, ref, mask, reward, normalization=how, agent=role)
    returns = algo.returns_to_go(algo.token_rewards(reward, kl, mask), mask)
    m0 = mask[:2].bool()
    # μ: per role over tokens; per agent over actions (each action's return at its first token)
    # no spread: the reward part (0.2, the same for both) is taken away, the KL part is left as it is
    assert torch.allclose(adv[:2], torch.where(m0, returns[:2] - 0.2, 0.0), atol=1e-7)
    reference = (algo.normalize_per_role if how == "per_role" else algo.normalize_per_agent)(returns, mask, role)
    assert torch.allclose(adv[2:], reference[2:], atol=1e-6)  # the reference formula where rewards differ
    assert adv[2:][mask[2:].bool()].abs().max() > 0.5 > adv[:2].abs().max()


def test_per_role_turn_a_group_of_one_multi_token_action_is_not_blown_up():
    # one sample of a decision: its tokens' returns differ only by KL; before, (x − μ)/1e-4 made that ±hundreds
    adv = algo.advantages(OLD, REF, KMASK, torch.tensor([0.2, 0.5, 0.9]), normalization="per_role_turn",
                          agent=torch.tensor([0, 1, 2]), turn=torch.zeros(3, dtype=torch.long),
                          task=torch.zeros(3, dtype=torch.long))
    assert torch.allclose(adv, torch.where(KMASK.bool(), _kl_returns(), 0.0), atol=1e-7)  # β-sized, not ±hundreds


# ---- the outcome reaches every action of its agent (issue 39) ----------------------------------------
# two episodes of one token per action: agent A acts twice (a cell, then the value; order 0, 1), then agent
# B once (order 2). Episode 0 succeeds: the env pays each agent 10 × 1 × reward_scale 0.1 = 1.0 at the end,
# on its last action (A's second, B's). Episode 1 fails: 0. β = 0 (old = ref), no coach score.
OUT_EPISODE = torch.tensor([0, 0, 0, 1, 1, 1])
OUT_AGENT = torch.tensor([0, 0, 1, 0, 0, 1])
OUT_ORDER = torch.tensor([0, 1, 2, 0, 1, 2])
OUT_PAID = torch.tensor([0.0, 1.0, 1.0, 0.0, 0.0, 0.0])


def _outcome_advantages(scope, credit, coach=None, normalization="global"):
    reward = OUT_PAID if coach is None else OUT_PAID + coach
    z = torch.zeros(6, 1)
    return algo.advantages(z, z, torch.ones(6, 1), reward, beta=0.0, scope=scope, episode=OUT_EPISODE,
                           agent=OUT_AGENT, order=OUT_ORDER, normalization=normalization, outcome=OUT_PAID,
                           outcome_credit=credit)[:, 0]


def _whitened(returns):
    x = torch.tensor(returns)
    return (x - x.mean()) / x.std(unbiased=False)


@pytest.mark.parametrize("scope", ["action", "agent", "episode"])
def test_the_outcome_reaches_an_agents_earlier_action_under_every_scope(scope):
    # returns 1, 1, 1 | 0, 0, 0: the cell that computed shares the team's result, once (never 2 at scope episode)
    adv = _outcome_advantages(scope, "every_action")
    assert torch.allclose(adv, torch.tensor([1.0, 1.0, 1.0, -1.0, -1.0, -1.0]), atol=1e-6)
    assert torch.allclose(_outcome_advantages(scope, "every_action", normalization="per_role"), adv, atol=1e-6)


def test_the_last_action_ablation_leaves_the_earlier_action_out_or_counts_the_outcome_twice():
    # scope action: returns 0, 1, 1 | 0, 0, 0, so the successful team's cell sits below the mean, with the
    # failed team's: −(1/3)/(√2/3) = −1/√2
    adv = _outcome_advantages("action", "last_action")
    assert torch.allclose(adv, _whitened([0.0, 1, 1, 0, 0, 0]), atol=1e-6)
    assert adv[0] == pytest.approx(-1 / math.sqrt(2), abs=1e-6)
    assert adv[0] == pytest.approx(float(adv[3]))
    # per role: A's values 0, 1 | 0, 0 → the successful cell at (0 − 1/4)/√(3/16) = −1/√3
    per_role = _outcome_advantages("action", "last_action", normalization="per_role")
    assert per_role[0] == pytest.approx(-1 / math.sqrt(3), abs=1e-6)
    # scope agent carries A's payment back: the same as every_action
    assert torch.allclose(_outcome_advantages("agent", "last_action"), _outcome_advantages("agent", "every_action"))
    # scope episode adds every later role's payment: A's actions get 2, B's 1
    assert torch.allclose(_outcome_advantages("episode", "last_action"), _whitened([2.0, 2, 1, 0, 0, 0]), atol=1e-6)


def test_process_rewards_follow_the_scope_and_the_outcome_is_added_once():
    coach = torch.tensor([0.2, 0.5, 0.9, 0.1, 0.3, 0.4])  # process+outcome: scaled coach scores
    # scope episode: A's cell 0.2 + 0.5 + 0.9 + its own payment 1 = 2.6; A's value 2.4; B 1.9; episode 1 0.8, 0.7, 0.4
    adv = _outcome_advantages("episode", "every_action", coach=coach)
    assert torch.allclose(adv, _whitened([2.6, 2.4, 1.9, 0.8, 0.7, 0.4]), atol=1e-6)
    # scope action: each action's own score + its agent's payment
    adv = _outcome_advantages("action", "every_action", coach=coach)
    assert torch.allclose(adv, _whitened([1.2, 1.5, 1.9, 0.1, 0.3, 0.4]), atol=1e-6)


def test_the_batch_credits_what_the_env_paid_at_the_end_to_every_action_of_the_role():
    from mappa_train.config import load_config
    from mappa_train.rollout import Transition

    def action(role, episode, index, end):
        return Transition(role=role, policy="shared", prompt_ids=[1], action_ids=[5], logprobs=[0.0],
                          coach_reward=0.0, coach_ok=True, end_reward=end, outcome_reward=end / 10,
                          episode_id=episode, action_index=index, turn_index=0, task_id="t")

    ts = [action("a", 0, 0, 0.0), action("a", 0, 1, 10.0), action("b", 0, 2, 10.0),
          action("a", 1, 0, 0.0), action("a", 1, 1, 0.0), action("b", 1, 2, 0.0)]
    for credit, first in (("every_action", 1.0), ("last_action", -1 / math.sqrt(2))):
        cfg = load_config(None, ["algo.reward_scale=0.1", "algo.beta=0", f"algo.outcome_credit={credit}"]).algo
        batch = algo.Batch.of(ts, cfg)
        assert torch.allclose(batch.outcome, OUT_PAID)
        zeros = [torch.zeros(1)] * 6
        batch.score(zeros, zeros, cfg)
        assert float(batch.samples[0].advantages[0]) == pytest.approx(first, abs=1e-6)


# ---- a collapsed policy is pulled back by the KL (issue 39) ------------------------------------------

def test_a_policy_collapsed_onto_one_token_with_no_reward_spread_is_pulled_back_to_the_reference():
    """A softmax over 4 tokens collapsed onto token 0 (π ≈ 0.999, the reference uniform); every sample is
    token 0 and scores the same. Centred, its advantage was exactly 0 and Adam never moved; the uncentred
    KL (−β·kl, kl = log π − log π_ref ≈ 1.4 > 0) pushes token 0 down."""
    theta = torch.tensor([8.0, 0.0, 0.0, 0.0], requires_grad=True)
    ref = torch.log_softmax(torch.zeros(4), 0)
    opt = torch.optim.Adam([theta], lr=0.1)
    start = float(torch.softmax(theta.detach(), 0)[0])
    mask, actions = torch.ones(8, 1), torch.zeros(8, 1, dtype=torch.long)  # every sample the collapsed token
    for _ in range(20):
        logp = torch.log_softmax(theta, 0)[actions]  # [8, 1]
        adv = algo.advantages(logp.detach(), ref[actions], mask, torch.zeros(8), beta=0.01)
        assert float(adv.max()) < 0  # not 0: every sampled token is pushed down in proportion to its KL
        loss = algo.ppo_clip_loss(logp, logp.detach(), adv, mask)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(torch.softmax(theta.detach(), 0)[0]) < start - 0.05  # 0.999 -> 0.94 (centred: 0.999)


# ---- the learner scores the untruncated policy, so a training preset cannot set top-p ---------------

def test_training_with_top_p_below_one_is_refused_in_one_line():
    from mappa_train.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="generation.top_p=0.9 would train off-policy") as err:
        load_config(None, ["generation.top_p=0.9"])
    assert "\n" not in str(err.value)
    assert load_config(None, ["generation.top_p=1.0"]).generation.top_p == 1.0


# ---- empty and length-cut actions are penalised, or the run says that they are not ---------------------

def test_an_empty_action_and_a_trained_cut_action_get_their_low_score_as_a_negative_advantage():
    from mappa_train.config import load_config
    from mappa_train.rollout import Transition

    def action(episode, score, ids=(5, 6, 7), finish="stop"):
        return Transition(role="a", policy="shared", prompt_ids=[1], action_ids=list(ids), logprobs=[0.0] * len(ids),
                          coach_reward=score, coach_ok=True, end_reward=0.0, outcome_reward=0.0, episode_id=episode,
                          action_index=0, turn_index=0, task_id="t", finish_reason=finish)

    # the rule coach scores an empty action (the stop token alone) 0, a cut one without its value low
    ts = [action(0, 8.0), action(1, 8.0), action(2, 0.0, ids=(2,)), action(3, 2.0, finish="length")]
    cfg = load_config(None, ["algo.reward_scale=0.1", "algo.mask_length_cut=false"]).algo
    batch = algo.Batch.of(ts, cfg)
    assert batch.trained == [True, True, True, True]  # the empty action is kept: its one token is trained on
    zeros = [torch.zeros(len(t.action_ids)) for t in ts]
    batch.score(zeros, zeros, cfg)
    adv = [float(s.advantages.mean()) for s in batch.samples]
    assert adv[2] < adv[3] < 0 < adv[0]


def test_a_step_whose_actions_are_mostly_cut_and_masked_says_nothing_penalises_them():
    from mappa_train.config import load_config
    from mappa_train.health import masked_length_cut

    cfg = load_config(None, ["generation.max_new_tokens=48"])
    why = masked_length_cut(cfg, {"length_cut": 6.0, "actions": 4.0})
    assert "6 of 10 kept actions were cut at generation.max_new_tokens=48" in why
    assert "algo.mask_length_cut=false" in why
    assert masked_length_cut(cfg, {"length_cut": 4.0, "actions": 6.0}) is None
    unmasked = load_config(None, ["algo.mask_length_cut=false"])
    assert masked_length_cut(unmasked, {"length_cut": 6.0, "actions": 10.0}) is None
    from types import SimpleNamespace

    from mappa_train.health import EmptySteps

    with pytest.warns(UserWarning, match="step 3: 6 of 10 kept actions were cut"):  # the driver's per-step check
        EmptySteps(cfg).check(3, {"length_cut": 6.0, "actions": 4.0}, SimpleNamespace(dropped=0), lambda: None)
