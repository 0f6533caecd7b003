"""The RL math of MAPPA: REINFORCE++ with per-action coach rewards, top to bottom.

Every tensor is [B, T]: one row per action (an agent's prompt followed by the tokens it sampled),
`mask` is 1 on the action's tokens and 0 on prompt and padding. Log-probabilities are per token,
aligned with the token they score.

What is implemented (the paper, arXiv 2601.23228):
1. per-token KL to the frozen reference model, k1 estimator: kl_i = log πθ_old(a_i) − log πref(a_i);
2. token rewards r_i = −β·kl_i, plus the coach's 0–10 score (times `reward_scale`) on the action's
   last token, β = 0.01;
3. the undiscounted return-to-go A_i = Σ_{j≥i} r_j (γ = 1);
4. whitening of A over every action token of the batch, all agents together: Â = (A − μ)/σ (a group
   whose rewards are all equal is not whitened: below);
5. the PPO clipped surrogate, ε = 0.2, averaged over all action tokens of the batch. The clip acts only
   from a batch's second optimizer step on (ceil(actions / learner.train_batch_size) × `algo.epochs` steps):
   the first sees π = π_old, ratio 1. With one mini-batch and one epoch, as in the CPU presets and every
   figure in docs/results.md, the update is plain REINFORCE++ and `clip_bound` is 0 (docs/training.md).

At the end, the same steps over a training step's actions: `Batch` decides which actions enter the
loss and numbers their roles, episodes and tasks for steps 1–4 (`Batch.score`); `micro_loss` is
step 5 on one micro-batch of the learner, with its loss weights and clip statistics.

Options a researcher will want (defaults are the paper's):
- `scope` of the return: "action" sums within one action (the paper's reference code); "agent" also
  adds the rewards of the same agent's later actions in the episode; "episode" adds every later
  action's rewards in the episode, whoever took it. Rows are ordered by `Transition.action_index`.
- how an outcome reaches the actions (`outcome_credit`; reward modes outcome, process+outcome): what the env
  pays an agent when the episode ends is the team's result, and "every_action" (the default, as outcome-
  reward RL runs it) adds it to the return of every action of that agent, once, whatever the scope: the
  cell that computed and the action that answered share the team's result. "last_action" puts it on the
  agent's last action as a reward like a coach score and lets `scope` carry it back; with scope "action"
  the agent's earlier actions get none of it (and per-role whitening then pushes them below the role's
  mean whenever that mean is positive): the weak outcome arm, kept as a labelled ablation only.
- KL in the reward (REINFORCE++, the paper) or in the loss (`kl_in_loss`: β·k3 added to the policy
  loss, GRPO-style, since k1's gradient is zero in expectation).
- the advantage normalisation of step 4 (`normalize`): "global" (the paper's text), "per_role" (the
  reference code), "per_role_turn" (AT-GRPO-style groups) or "per_agent" (Dr.MAS-style); see below;
  and what its μ, σ count (`whiten_unit`): every action token (the reference code) or each action once
  (GRPO's per-sample statistics), which leaves the tokens two samples share no net push from their lengths.

Where this departs from the paper: σ is the population standard deviation (no Bessel correction).
Whether a group (the batch, or a role's actions, ... as `normalize` groups them) has a signal to
whiten is decided from its *rewards*, not from the KL-shifted returns: a group whose reward-only
returns (`signal`, the returns with β = 0) spread by σ ≤ `std_floor` — a floor in reward units,
coach score × `reward_scale`, 1e-4 by default — has no reward signal. Its advantage is A − μ_signal,
not divided by anything: the reward part is exactly 0 and the KL part is −β·Σkl, at its own size and
not centred (with `kl_in_loss` the advantage is exactly 0 and the KL acts through the loss's own term).
Whitening it instead would blow β·Σkl up to unit variance and train on KL noise as if it were the
coach's verdict (an all-fail batch then has advantage std 1 and correlation 1 with −Σkl). Centring
it would leave a policy that collapsed onto one action (every sample the same empty action, every
reward 0: the tiny model at lr 3e-3 within 4–6 steps) with advantage exactly 0, so nothing pulled it
back; uncentred, the KL penalises the collapsed tokens in proportion to how far they moved from the
reference (tests/train/test_algo.py). The pull is β-sized: β is in scaled-reward units, so against the
coach's 0–10 score it weighs β / `reward_scale` per nat; raise `beta` or use `kl_in_loss` for more. Groups with a
reward spread are whitened exactly as above, dividing by max(σ, std_floor).
The PPO log-ratio is clamped to ±MAX_LOG_RATIO before exp, so a stale or corrupted old log-prob (−inf,
+95) cannot overflow to inf/NaN (the clamped tokens get no gradient);
the k1 KL uses the logprobs of the policy that sampled the batch (πθ_old), which at the
first update step equals πθ — the paper does not say which it uses.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, get_args

import torch

from mappa_train.config.schema import Normalization, OutcomeCredit, Scope, WhitenUnit

if TYPE_CHECKING:
    from mappa_train.config import AlgoConfig
    from mappa_train.rollout import Transition

SCOPES = get_args(Scope)
OUTCOME_CREDITS = get_args(OutcomeCredit)
MAX_LOG_RATIO = 20.0  # |log π/π_old| beyond this is clamped: exp(20) ≈ 5e8 is finite in fp32, exp(89) is not
NORMALIZATIONS = get_args(Normalization)
WHITEN_UNITS = get_args(WhitenUnit)


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


def _stats(x: torch.Tensor, signal: torch.Tensor, std_floor: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(μ, divisor) of the values `x` [n] of one group: divisor max(σ, std_floor); or, when the group's
    reward-only values `signal` [n] spread by σ ≤ std_floor (no reward signal), the signal's μ and 1."""
    mean, std = x.mean(), x.std(unbiased=False)
    if signal.std(unbiased=False) <= std_floor:  # the KL part stays uncentred: see the module docstring
        return signal.mean(), torch.ones_like(std)
    return mean, std.clamp(min=std_floor)


def whiten(x: torch.Tensor, mask: torch.Tensor, group: torch.Tensor | None = None,
           std_floor: float = 1e-4, signal: torch.Tensor | None = None, unit: WhitenUnit = "token") -> torch.Tensor:
    """(x − μ)/max(σ, std_floor) on every action token, μ and σ over the batch (or each `group` [B]). -> [B, T].

    `unit` is what μ and σ count: every action token ("token": a longer action weighs more) or every action
    once, by its return at its first token ("action": GRPO's per-sample statistics). `signal` [B, T] is the
    reward-only part of x (the returns without KL; x itself when None): a group whose signal spreads by
    σ ≤ std_floor gets x − μ_signal, unscaled (see the module docstring).
    """
    signal = x if signal is None else signal
    if group is None:
        group = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
    if unit == "action":
        first = mask * (mask.cumsum(1) == 1)  # [B, T]: 1 at each row's first action token
        values, signal_values = (x * first).sum(1), (signal * first).sum(1)  # [B]: each action's return
    out = torch.zeros_like(x)
    for g in group.unique():
        rows = group == g
        m = mask[rows].bool()
        if unit == "token":
            mean, divisor = _stats(x[rows][m], signal[rows][m], std_floor)
        else:
            mean, divisor = _stats(values[rows], signal_values[rows], std_floor)
        out[rows] = torch.where(m, (x[rows] - mean) / divisor, 0.0)
    return out


# ---- step 4, the advantage normalisations (the returns x [B, T]; ids [B], one per row) --------------
# `signal` everywhere: the reward-only returns [B, T] that decide whether a group has anything to whiten

def normalize_global(x: torch.Tensor, mask: torch.Tensor, std_floor: float = 1e-4,
                     signal: torch.Tensor | None = None, unit: WhitenUnit = "token") -> torch.Tensor:
    """The paper: one μ, σ over every action token of the batch, all agents together."""
    return whiten(x, mask, std_floor=std_floor, signal=signal, unit=unit)


def normalize_per_role(x: torch.Tensor, mask: torch.Tensor, role: torch.Tensor,
                       std_floor: float = 1e-4, signal: torch.Tensor | None = None,
                       unit: WhitenUnit = "token") -> torch.Tensor:
    """The paper's reference code: μ, σ over the tokens of each role's actions."""
    return whiten(x, mask, group=role, std_floor=std_floor, signal=signal, unit=unit)


def normalize_per_role_turn(x: torch.Tensor, mask: torch.Tensor, task: torch.Tensor, role: torch.Tensor,
                            turn: torch.Tensor, std_floor: float = 1e-4,
                            signal: torch.Tensor | None = None, unit: WhitenUnit = "token") -> torch.Tensor:
    """AT-GRPO-style: a group is the actions that share a task, a role and a position in the role's
    turn (the k-th action of the executor on problem p), so each action is compared with the other
    samples of the same decision. A group of one has no reward spread: its reward advantage is 0.
    Counting tokens (`unit` "token"), of two samples of one decision the longer pulls μ toward its
    return, so the tokens they share (the action's format) get a net push toward the shorter one's sign."""
    group = torch.unique(torch.stack([task, role, turn], dim=1), dim=0, return_inverse=True)[1]
    return whiten(x, mask, group=group, std_floor=std_floor, signal=signal, unit=unit)


def normalize_per_agent(x: torch.Tensor, mask: torch.Tensor, agent: torch.Tensor,
                        std_floor: float = 1e-4, signal: torch.Tensor | None = None) -> torch.Tensor:
    """Dr.MAS-style: each agent's μ_k, σ_k over its *actions* (the return at each action's first
    token), so an action counts once whatever its length; then (x − μ_k)/σ_k on every token."""
    return whiten(x, mask, group=agent, std_floor=std_floor, signal=signal, unit="action")


def normalize(x: torch.Tensor, mask: torch.Tensor, how: Normalization = "global", *, role: torch.Tensor | None = None,
              turn: torch.Tensor | None = None, task: torch.Tensor | None = None,
              std_floor: float = 1e-4, signal: torch.Tensor | None = None, unit: WhitenUnit = "token") -> torch.Tensor:
    """Step 4 as configured (`algo.whiten`, `algo.whiten_unit`); `role`, `turn` and `task` are [B] integer
    ids. "per_agent" counts actions whatever `unit` says."""
    if unit not in WHITEN_UNITS:
        raise ValueError(f"whiten_unit must be one of {WHITEN_UNITS}, got {unit!r}")
    if how == "global":
        return normalize_global(x, mask, std_floor, signal, unit)
    if role is None or (how == "per_role_turn" and (turn is None or task is None)):
        raise ValueError(f"normalisation {how!r} needs role ids (and turn and task ids for 'per_role_turn')")
    if how == "per_role":
        return normalize_per_role(x, mask, role, std_floor, signal, unit)
    if how == "per_role_turn":
        return normalize_per_role_turn(x, mask, task, role, turn, std_floor, signal, unit)
    if how == "per_agent":
        return normalize_per_agent(x, mask, role, std_floor, signal)
    raise ValueError(f"normalisation must be one of {NORMALIZATIONS}, got {how!r}")


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


def outcome_returns(outcome: torch.Tensor, episode: torch.Tensor, agent: torch.Tensor) -> torch.Tensor:
    """`outcome_credit` "every_action": what each row's agent was paid at the end of its episode. [B] -> [B].

    `outcome` [B] holds an end payment on each agent's last row (0 elsewhere); every row of the same
    (episode, agent) gets their sum, once, so no action counts an outcome twice whatever the scope."""
    same = (episode[:, None] == episode[None, :]) & (agent[:, None] == agent[None, :])  # [B, B]
    return same.to(outcome.dtype) @ outcome


def advantages(old_logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, reward: torch.Tensor, *,
               beta: float = 0.01, kl_in_loss: bool = False, scope: Scope = "action",
               episode: torch.Tensor | None = None, agent: torch.Tensor | None = None,
               order: torch.Tensor | None = None, normalization: Normalization = "global",
               turn: torch.Tensor | None = None, task: torch.Tensor | None = None,
               std_floor: float = 1e-4, outcome: torch.Tensor | None = None,
               outcome_credit: OutcomeCredit = "every_action", unit: WhitenUnit = "token") -> torch.Tensor:
    """Steps 1–4 for a whole batch: normalised returns [B, T] from per-action rewards [B] (already scaled).

    `outcome` [B] is the part of `reward` that the env paid at the episode's end (on each agent's last
    row); `outcome_credit` decides which actions it reaches (module docstring). `episode`, `agent` and
    `order` ([B] integer ids) are needed for scopes "agent" and "episode" and for an outcome credited to
    every action; `normalization` and `unit` pick step 4 (`normalize`), which reads `agent` as the role id,
    `turn` and `task`.
    """
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    if outcome_credit not in OUTCOME_CREDITS:
        raise ValueError(f"outcome_credit must be one of {OUTCOME_CREDITS}, got {outcome_credit!r}")
    kl = kl_k1(old_logp, ref_logp)
    spread = torch.zeros_like(reward)  # [B]: the outcome each row's return gets outside the scope
    if outcome is not None and outcome_credit == "every_action" and bool(outcome.any()):
        if episode is None or agent is None:
            raise ValueError("an outcome credited to every action needs episode and agent ids")
        reward, spread = reward - outcome, outcome_returns(outcome, episode, agent)
    group = None
    if scope != "action":
        if episode is None or order is None or (scope == "agent" and agent is None):
            raise ValueError(f"scope {scope!r} needs episode and order ids (and agent ids for 'agent')")
        group = episode if scope == "episode" else episode * (int(agent.max()) + 1) + agent

    def returns(beta: float) -> torch.Tensor:
        rewards = token_rewards(reward, kl, mask, beta=beta)
        return returns_to_go(rewards, mask, group, order) + spread[:, None] * mask

    # the reward-only returns decide which groups have a signal: KL differences alone are not one
    return normalize(returns(0.0 if kl_in_loss else beta), mask, normalization, role=agent, turn=turn,
                     task=task, std_floor=std_floor, signal=returns(0.0), unit=unit)


# ---- the batch: which of a step's actions enter the loss, and their rows ----------------------------

@dataclass
class Sample:
    """One action to train on: its prompt and action ids; the tensors are per action token."""

    prompt_ids: list[int]
    action_ids: list[int]
    old_logp: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    ref_logp: torch.Tensor | None = None  # needed only with kl_in_loss
    first_logp: torch.Tensor | None = None  # the learner's, from the update's first optimizer step (π_θ_old)

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.action_ids)


@dataclass
class Batch:
    """A step's actions that have a reward to learn from, one row each ([B] per row unless noted).

    A failed coach call has no reward, and an action the env kept none of has nothing judged: both
    are left out. Of the rest, an action cut at max_new_tokens has no natural end, so its coach score
    says little about its tokens, and an action whose inputs an upstream role broke could not
    succeed: with `mask_length_cut` / `mask_excused` they stay out of the loss (`trained` False) but
    their rewards still reach the earlier actions' returns. An action the env cut is trained on the
    ids the sandbox and the coach saw, no more.
    """

    samples: list[Sample]  # prompt + judged action ids; `score` sets their old/ref log-probs and advantages
    roles: list[str]
    trained: list[bool]  # enters the loss
    generator_logp: list[torch.Tensor]  # [n_action] each: the sampling policy's log-probs
    reward: torch.Tensor  # reward_scale × (coach score + what the env paid at the end)
    outcome: torch.Tensor  # reward_scale × what the env paid at the end (on each role's last action; else 0)
    role: torch.Tensor  # integer ids: role, episode, position in the episode and in the role's turn, task
    episode: torch.Tensor
    order: torch.Tensor
    turn: torch.Tensor
    task: torch.Tensor
    counts: dict[str, float]  # actions trained on, env-cut, length-cut and excused actions

    @classmethod
    def of(cls, transitions: Sequence[Transition], cfg: AlgoConfig) -> Batch:
        kept = [t for t in transitions if t.coach_ok]
        env_cut = sum(t.judged_tokens is not None for t in kept)
        kept = [t for t in kept if t.judged_tokens != 0]
        trained = [not (cfg.mask_length_cut and t.finish_reason == "length") and not (cfg.mask_excused and t.excused)
                   for t in kept]
        judged = [len(t.action_ids) if t.judged_tokens is None else t.judged_tokens for t in kept]
        roles, episodes = sorted({t.role for t in kept}), sorted({str(t.episode_id) for t in kept})
        tasks = sorted({t.task_id for t in kept})
        return cls(
            samples=[Sample(list(t.prompt_ids), list(t.action_ids[:n])) for t, n in zip(kept, judged)],
            roles=[t.role for t in kept], trained=trained,
            generator_logp=[torch.tensor(t.logprobs[:n], dtype=torch.float32) for t, n in zip(kept, judged)],
            reward=torch.tensor([cfg.reward_scale * (t.coach_reward + t.end_reward) for t in kept]),
            outcome=torch.tensor([cfg.reward_scale * t.end_reward for t in kept]),
            role=torch.tensor([roles.index(t.role) for t in kept]),
            episode=torch.tensor([episodes.index(str(t.episode_id)) for t in kept]),
            order=torch.tensor([t.action_index for t in kept]), turn=torch.tensor([t.turn_index for t in kept]),
            task=torch.tensor([tasks.index(t.task_id) for t in kept]),
            counts={"actions": float(sum(trained)), "env_cut": float(env_cut),
                    "length_cut": float(sum(t.finish_reason == "length" for t in kept)),
                    "excused": float(sum(t.excused for t in kept))})

    def rows(self, policy_of: Mapping[str, str], policy: str, trained_only: bool = False) -> list[int]:
        """The rows whose role `policy` plays (those that enter the loss only, with `trained_only`)."""
        return [i for i, (role, train) in enumerate(zip(self.roles, self.trained))
                if policy_of[role] == policy and (train or not trained_only)]

    def score(self, learner_logp: list[torch.Tensor] | None, ref_logp: list[torch.Tensor],
              cfg: AlgoConfig) -> dict[str, float]:
        """Steps 1–4 over the batch: sets each sample's old/ref log-probs and advantages; returns the
        mean KL, reward and the action-token count. π_θ_old is the generator's log-probs or the
        learner's (`old_logprobs`)."""
        old = self.generator_logp if cfg.old_logprobs == "generator" else learner_logp
        # [B, T] tensors over action tokens only: the advantage math never looks at prompts
        mask = _pad([torch.ones(len(s.action_ids)) for s in self.samples])
        old_t, ref_t = _pad(old), _pad(ref_logp)
        adv = advantages(old_t, ref_t, mask, self.reward, beta=cfg.beta, kl_in_loss=cfg.kl_in_loss, scope=cfg.scope,
                         episode=self.episode, agent=self.role, order=self.order, normalization=cfg.whiten,
                         turn=self.turn, task=self.task, std_floor=cfg.std_floor, outcome=self.outcome,
                         outcome_credit=cfg.outcome_credit, unit=cfg.whiten_unit)
        for i, s in enumerate(self.samples):
            n = len(s.action_ids)
            s.old_logp, s.ref_logp, s.advantages = old_t[i, :n], ref_t[i, :n], adv[i, :n]
        kl = kl_k1(old_t, ref_t)
        return {"kl": float((kl * mask).sum() / mask.sum()), "reward": float(self.reward.mean()),
                "action_tokens": float(mask.sum())}


# ---- step 5 on one micro-batch: the loss the learner backpropagates, and what the clip did ----------

LOSS_STATS = ("loss", "weight", "clip_frac", "clip_bound", "approx_kl", "tokens")  # summed over micro-batches


def loss_count(samples: Sequence[Sample], cfg: AlgoConfig) -> float:
    """What the loss is a mean over: action tokens (`loss_mean` "token": every token weighs the same,
    the paper) or actions ("sequence": every action weighs the same, its tokens share 1/len)."""
    return float(len(samples) if cfg.loss_mean == "sequence" else sum(len(s.action_ids) for s in samples))


def micro_loss(logps: list[torch.Tensor], micro: Sequence[Sample], cfg: AlgoConfig,
               total: float) -> tuple[torch.Tensor, dict[str, float]]:
    """A micro-batch's share of the mini-batch loss — its sum divided by `total`, the mini-batch's
    `loss_count` over every rank — from the policy's log-probs [n_action] of each sample; and the
    micro-batch's `LOSS_STATS`: `clip_frac` counts tokens outside 1 ± ε, `clip_bound` those the clip
    gave no gradient."""
    logp = _pad(logps).float()  # [R, A]: action tokens only
    device = logp.device
    mask = _pad([torch.ones(len(s.action_ids)) for s in micro]).to(device)
    # per-token weights: 1 (token mean) or 1/len (sequence mean); the divisor `total` matches
    weight = mask if cfg.loss_mean == "token" else mask / mask.sum(1, keepdim=True)
    old = _pad([s.old_logp for s in micro]).to(device)
    adv = _pad([s.advantages for s in micro]).to(device)
    loss = ppo_clip_loss(logp, old, adv, weight, eps=cfg.clip_eps, n_tokens=total)
    if cfg.kl_in_loss:
        ref = _pad([s.ref_logp for s in micro]).to(device)
        loss = loss + kl_loss(logp, ref, weight, beta=cfg.beta, n_tokens=total)
    with torch.no_grad():
        log_ratio = (logp - old).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
        ratio, eps = log_ratio.exp(), cfg.clip_eps
        clipped = ((ratio - 1).abs() > eps).float()  # outside the trust region
        # the clip binds (the token gets no gradient): the ratio left it in the advantage's direction
        bound = (((ratio > 1 + eps) & (adv > 0)) | ((ratio < 1 - eps) & (adv < 0))).float()
        part = {"loss": float(loss) * total, "weight": float(weight.sum()),
                "clip_frac": float((clipped * mask).sum()), "clip_bound": float((bound * mask).sum()),
                "approx_kl": float((-log_ratio * mask).sum()), "tokens": float(mask.sum())}
    return loss, part


def _pad(rows: Sequence[torch.Tensor]) -> torch.Tensor:
    """Right-pad 1-D tensors with zeros into [R, longest]."""
    return torch.nn.utils.rnn.pad_sequence(list(rows), batch_first=True)
