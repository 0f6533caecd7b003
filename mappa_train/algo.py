"""The RL math of MAPPA: REINFORCE++ with per-action coach rewards, top to bottom.

Every tensor is [B, T]: one row per action (an agent's prompt followed by the tokens it sampled),
`mask` is 1 on the action's tokens and 0 on prompt and padding. Log-probabilities are per token,
aligned with the token they score.

What is implemented (the paper, arXiv 2601.23228):
1. per-token KL to the frozen reference model, k1 estimator: kl_i = log πθ_old(a_i) − log πref(a_i);
2. token rewards r_i = −β·kl_i, plus the coach's 0–10 score (times `reward_scale`) on the action's
   last token, β = 0.01;
3. the undiscounted return-to-go A_i = Σ_{j≥i} r_j (γ = 1);
4. whitening of A over every action token of the batch, all agents together: Â = (A − μ)/σ;
5. the PPO clipped surrogate, ε = 0.2, averaged over all action tokens of the batch.

Options a researcher will want (defaults are the paper's):
- `scope` of the return: "action" sums within one action (the paper's reference code); "agent" also
  adds the rewards of the same agent's later actions in the episode; "episode" adds every later
  action's rewards in the episode, whoever took it. Rows are ordered by `Transition.action_index`.
- KL in the reward (REINFORCE++, the paper) or in the loss (`kl_in_loss`: β·k3 added to the policy
  loss, GRPO-style, since k1's gradient is zero in expectation).
- per-role whitening (the reference code) instead of global (the paper's text).

Where this departs from the paper: σ is the population standard deviation (no Bessel correction),
floored at `std_floor` (1e-4, as the reference code), so a batch whose returns are all nearly equal
(every coach score the same) gives advantages near 0, not float noise blown up to ±1; the PPO
log-ratio is clamped to ±MAX_LOG_RATIO before exp, so a stale or corrupted old log-prob (−inf,
+95) cannot overflow to inf/NaN (the clamped tokens get no gradient);
the k1 KL uses the logprobs of the policy that sampled the batch (πθ_old), which at the
first update step equals πθ — the paper does not say which it uses.
"""
from __future__ import annotations

from typing import Literal

import torch

Scope = Literal["action", "agent", "episode"]
SCOPES = ("action", "agent", "episode")
MAX_LOG_RATIO = 20.0  # |log π/π_old| beyond this is clamped: exp(20) ≈ 5e8 is finite in fp32, exp(89) is not


def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k1 estimator of KL(π‖πref) per token: log π − log πref. [B, T] -> [B, T]."""
    return logp - ref_logp


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimator per token, exp(d) − d − 1 with d = log πref − log π: non-negative, low variance."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def last_token_mask(mask: torch.Tensor) -> torch.Tensor:
    """1 at each row's last masked position, else 0. [B, T] -> [B, T]."""
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = torch.where(mask.bool(), positions, -1).max(dim=1, keepdim=True).values  # [B, 1]
    return ((positions == last) & mask.bool()).to(mask.dtype)


def token_rewards(coach_reward: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, beta: float = 0.01) -> torch.Tensor:
    """r = −β·kl on action tokens, plus coach_reward [B] on each row's last action token. -> [B, T]."""
    return (-beta * kl + coach_reward[:, None] * last_token_mask(mask)) * mask


def returns_to_go(rewards: torch.Tensor, mask: torch.Tensor, group: torch.Tensor | None = None,
                  order: torch.Tensor | None = None) -> torch.Tensor:
    """Undiscounted return-to-go, Σ_{j≥i} r_j, on action tokens. [B, T] -> [B, T].

    With `group` and `order` ([B] each) a row's return also includes the whole rewards of the later
    rows (larger `order`) of its group: group = episode for scope "episode", (episode, agent) for
    "agent". Without them the sum stays within the row (scope "action").
    """
    rewards = rewards * mask
    returns = rewards.flip(1).cumsum(1).flip(1)  # [B, T]
    if group is not None:
        assert order is not None, "returns_to_go: `order` is needed with `group`"
        row_total = rewards.sum(1)  # [B]
        later = (group[:, None] == group[None, :]) & (order[None, :] > order[:, None])  # [B, B]: j after i
        returns = returns + (later.to(rewards.dtype) @ row_total)[:, None]
    return returns * mask


def whiten(x: torch.Tensor, mask: torch.Tensor, group: torch.Tensor | None = None,
           std_floor: float = 1e-4) -> torch.Tensor:
    """(x − μ)/max(σ, std_floor), μ and σ over all masked entries of the batch (or of each `group` [B]). -> [B, T]."""
    if group is None:
        group = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
    out = torch.zeros_like(x)
    for g in group.unique():
        rows = group == g
        m = mask[rows].bool()
        values = x[rows][m]
        mean, std = values.mean(), values.std(unbiased=False)
        out[rows] = torch.where(m, (x[rows] - mean) / std.clamp(min=std_floor), 0.0)
    return out


def ppo_clip_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                  eps: float = 0.2, n_tokens: float | None = None) -> torch.Tensor:
    """PPO clipped surrogate, −min(ρÂ, clip(ρ, 1−ε, 1+ε)Â), as a masked token mean. -> scalar.

    `n_tokens` replaces the mask's own count as the divisor, so micro-batches (and ranks) that each
    hold part of a batch add up to the mean over the whole batch. `mask` may hold per-token weights
    (1/len for a sequence mean). log ρ is clamped to ±MAX_LOG_RATIO (NaN counts as 0).
    """
    log_ratio = torch.nan_to_num(logp - old_logp, nan=0.0).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    ratio = torch.exp(log_ratio)
    surrogate = torch.minimum(ratio * advantages, ratio.clamp(1 - eps, 1 + eps) * advantages)
    return -(surrogate * mask).sum() / (mask.sum() if n_tokens is None else n_tokens)


def kl_loss(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, beta: float = 0.01,
            n_tokens: float | None = None) -> torch.Tensor:
    """β·k3 as a masked token mean, for `kl_in_loss` (the KL then stays out of the reward). -> scalar."""
    return beta * (kl_k3(logp, ref_logp) * mask).sum() / (mask.sum() if n_tokens is None else n_tokens)


def advantages(old_logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, reward: torch.Tensor, *,
               beta: float = 0.01, kl_in_loss: bool = False, scope: Scope = "action",
               episode: torch.Tensor | None = None, agent: torch.Tensor | None = None,
               order: torch.Tensor | None = None, per_role: torch.Tensor | None = None,
               std_floor: float = 1e-4) -> torch.Tensor:
    """Steps 1–4 for a whole batch: whitened returns [B, T] from per-action rewards [B] (already scaled).

    `episode`, `agent` and `order` ([B] integer ids) are needed for scopes "agent" and "episode";
    `per_role` ([B] role ids) switches to per-role whitening.
    """
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    kl = kl_k1(old_logp, ref_logp)
    rewards = token_rewards(reward, kl, mask, beta=0.0 if kl_in_loss else beta)
    group = None
    if scope != "action":
        if episode is None or order is None or (scope == "agent" and agent is None):
            raise ValueError(f"scope {scope!r} needs episode and order ids (and agent ids for 'agent')")
        group = episode if scope == "episode" else episode * (int(agent.max()) + 1) + agent
    return whiten(returns_to_go(rewards, mask, group, order), mask, per_role, std_floor=std_floor)
