"""Rollouts on real MathChat-v0 envs (local sandbox, rule coach) with real generators.

Token exactness: what the learner gets (prompt_ids, action_ids, logprobs) is exactly what the
generator was given and sampled, a multi-action turn's prompts extend the previous tokens, and the
learner's forward pass reproduces the sampler's logprobs.
"""
import itertools

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import mappa_envs
from mappa_envs.coach.rule import RuleCoach
from mappa_envs.coach.types import CoachScore
from mappa_envs.core.pipeline import Task
from mappa_envs.core.tools import format_tool_output
from mappa_envs.mathchat import prompts as duties
from mappa_envs.sandbox import make_sandbox
from mappa_train.chat_tokens import ChatFormat, TemplateError
from mappa_train.generation import Generation, SamplingParams
from mappa_train.generation.hf import HFGenerator
from mappa_train.rollout import collect

TASKS = [Task(id=f"t{i}", prompt=f"What is {i} times 7?", answer=str(7 * i)) for i in range(1, 5)]
ROLES = ("problem_solver", "code_executor", "verifier")
PARAMS = SamplingParams(max_new_tokens=6)


class Recording:
    """Wraps a real generator; records every call's prompts and outputs."""

    def __init__(self, inner):
        self.inner = inner
        self.tokenizer = inner.tokenizer
        self.calls: list[tuple[list[list[int]], list[Generation]]] = []

    def generate(self, prompts, params):
        out = self.inner.generate(prompts, params)
        self.calls.append(([list(p) for p in prompts], out))
        return out

    def load_weights(self, named_tensors):
        self.inner.load_weights(named_tensors)


class ScriptedGenerator:
    """Answers each role from a script (cycled) and reports the model's own logprobs of those tokens."""

    def __init__(self, model, tokenizer, script: dict[str, list[str]]):
        self.model, self.tokenizer = model, tokenizer
        self.script = {role: itertools.cycle(texts) for role, texts in script.items()}

    def generate(self, prompts, params):
        out = []
        for prompt in prompts:
            text = next(self.script[role_of(self.tokenizer.decode(prompt))])
            ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
            with torch.no_grad():
                logits = self.model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1]
            logprobs = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids)[:, None])[:, 0]
            out.append(Generation(ids, logprobs.tolist(), text, "stop"))
        return out

    def load_weights(self, named_tensors):
        raise NotImplementedError


def role_of(prompt_text: str) -> str:
    for role, text in zip(ROLES, (duties.PROBLEM_SOLVER, duties.CODE_EXECUTOR, duties.VERIFIER)):
        if text in prompt_text:
            return role
    raise AssertionError(f"no role's duties in the prompt: {prompt_text[:200]!r}")


class FailingVerifierCoach:
    """The rule coach, except that every Verifier action gets no verdict (ok=False)."""

    def __init__(self):
        self.rule = RuleCoach()

    def score(self, request):
        if request.role == "verifier":
            return CoachScore(score=None, ok=False, error="coach unavailable")
        return self.rule.score(request)

    async def ascore(self, request):
        return self.score(request)


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir


@pytest.fixture(scope="module")
def hf(model_dir):
    return HFGenerator(model_dir)


@pytest.fixture(scope="module")
def sandbox():
    sb = make_sandbox("local", pool_size=2, preimport=(), timeout_s=20)
    yield sb
    sb.close()


@pytest.fixture
def make_envs(sandbox):
    made = []

    def make(n, **kwargs):
        envs = [mappa_envs.make("MathChat-v0", tasks=TASKS, sandbox=sandbox, **kwargs) for _ in range(n)]
        made.extend(envs)
        return envs

    yield make
    for env in made:
        env.close()


def episodes(n):
    return [{"seed": i, "options": {"task_index": i}} for i in range(n)]


def forward_logprobs(model, prompt, action):
    with torch.no_grad():
        logits = model(torch.tensor([prompt + action])).logits[0, len(prompt) - 1:-1]
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(action)[:, None])[:, 0]


def test_sampled_tokens_are_the_trained_tokens(hf, make_envs):
    gen = Recording(hf)
    rollout = collect(make_envs(2), gen, PARAMS, episodes(3), seed=1)
    assert [e.episode_id for e in rollout.episodes] == [0, 1, 2]
    assert [e.task_id for e in rollout.episodes] == ["t1", "t2", "t3"]
    assert len(rollout.transitions) == sum(e.actions for e in rollout.episodes) >= 9
    sampled = {(tuple(p), tuple(g.token_ids)): g for prompts, outs in gen.calls for p, g in zip(prompts, outs)}
    for t in rollout.transitions:
        g = sampled[(tuple(t.prompt_ids), tuple(t.action_ids))]  # this exact prompt produced these exact ids
        assert t.logprobs == g.logprobs
        # the learner's forward pass over the stored tokens reproduces the sampler's logprobs
        relearned = forward_logprobs(hf.model, t.prompt_ids, t.action_ids)
        assert torch.allclose(relearned, torch.tensor(t.logprobs), atol=1e-4)
        first_turn_prompt = hf.tokenizer.decode(t.prompt_ids)
        assert first_turn_prompt.startswith(f"<|im_start|>system\n{getattr(duties, t.role.upper())}")
        assert first_turn_prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")
    by_episode = {e.episode_id: [t.action_index for t in rollout.transitions if t.episode_id == e.episode_id]
                  for e in rollout.episodes}
    assert all(ix == list(range(len(ix))) for ix in by_episode.values())


def test_multi_action_turn_appends_sampled_tokens(model_dir, hf, make_envs):
    script = {
        "problem_solver": ["Seven times four. \\boxed{28}"],
        "code_executor": ["```python\nx = 4 * 7\n```", "```python\nprint(x)\n```", "The code printed 28. \\boxed{28}"],
        "verifier": ["Checked. \\boxed{28}"],
    }
    gen = Recording(ScriptedGenerator(hf.model, hf.tokenizer, script))
    (env,) = make_envs(1)
    rollout = collect([env], gen, PARAMS, [{"seed": 0, "options": {"task_id": "t4"}}])
    ex = [t for t in rollout.transitions if t.role == "code_executor"]
    assert [t.turn_index for t in ex] == [0, 1, 2]
    assert [t.action_index for t in ex] == [1, 2, 3]
    records = [a for a in env.episode.actions if a.role == "code_executor"]
    tok = hf.tokenizer
    for prev, t, record in zip(ex, ex[1:], records):
        # the later prompt starts with the earlier prompt and the ids sampled there, untouched
        assert t.prompt_ids[:len(prev.prompt_ids) + len(prev.action_ids)] == prev.prompt_ids + prev.action_ids
        new_text = tok.decode(t.prompt_ids[len(prev.prompt_ids) + len(prev.action_ids):])
        output = "Output of your code:\n" + format_tool_output(record.tool_results)
        assert new_text == f"\n<|im_start|>user\n{output}<|im_end|>\n<|im_start|>assistant\n"
    assert "28" in records[1].tool_results[0].stdout
    assert ex[-1].action_ids == tok.encode(script["code_executor"][2], add_special_tokens=False) + [tok.eos_token_id]
    for t in rollout.transitions:  # every stored sample is one the generator produced
        assert any(t.prompt_ids in prompts and t.action_ids in [g.token_ids for g in outs]
                   for prompts, outs in gen.calls)
        relearned = forward_logprobs(hf.model, t.prompt_ids, t.action_ids)
        assert torch.allclose(relearned, torch.tensor(t.logprobs), atol=1e-4)
    (stats,) = rollout.episodes
    assert stats.correct is True
    assert stats.score == 1.0
    assert stats.actions == 5
    assert all(t.outcome_reward == 1.0 for t in rollout.transitions)
    assert all(t.coach_reward > 5 for t in rollout.transitions if t.role == "verifier")


@pytest.mark.parametrize("mode", ["outcome", "process+outcome"])
def test_the_envs_end_of_episode_reward_lands_on_each_roles_last_action(hf, make_envs, mode):
    script = {
        "problem_solver": ["Seven times four. \\boxed{28}"],
        "code_executor": ["```python\nprint(4 * 7)\n```", "The code printed 28. \\boxed{28}"],
        "verifier": ["Checked. \\boxed{28}"],
    }
    (env,) = make_envs(1, reward_mode=mode)
    rollout = collect([env], ScriptedGenerator(hf.model, hf.tokenizer, script), PARAMS,
                      [{"seed": 0, "options": {"task_id": "t4"}}])
    by_role = {role: [t for t in rollout.transitions if t.role == role] for role in ROLES}
    for role, mine in by_role.items():  # 10 x the outcome score of 1
        assert [t.end_reward for t in mine] == [0.0] * (len(mine) - 1) + [10.0], role
    coach = [t.coach_reward for t in rollout.transitions]
    assert all(c == 0.0 for c in coach) if mode == "outcome" else all(c > 0 for c in coach)


def test_backprop_shares_land_on_each_action_and_sum_to_the_outcome(hf, make_envs):
    script = {
        "problem_solver": ["Seven times four. \\boxed{28}"],
        "code_executor": ["```python\nprint(4 * 7)\n```", "The code printed 28. \\boxed{28}"],
        "verifier": ["On reflection it is 29. \\boxed{29}"],  # overrules a right answer: the outcome is 0
    }
    (env,) = make_envs(1, reward_mode="backprop")
    rollout = collect([env], ScriptedGenerator(hf.model, hf.tokenizer, script), PARAMS,
                      [{"seed": 0, "options": {"task_id": "t4"}}])
    shares = [a.share for a in env.episode.actions]
    assert [t.coach_reward for t in rollout.transitions] == shares  # each action its own share
    assert all(t.end_reward == 0.0 for t in rollout.transitions)  # the role sums are not paid twice
    assert sum(t.coach_reward for t in rollout.transitions) == pytest.approx(0.0)  # 10 x an outcome of 0
    assert min(rollout.transitions, key=lambda t: t.coach_reward).role == "verifier"


def test_one_batched_generate_call_per_policy_per_round(hf, make_envs):
    gen = Recording(hf)
    rollout = collect(make_envs(3), gen, PARAMS, episodes(4), seed=2)
    assert rollout.generate_calls == {"shared": len(gen.calls)}
    assert len(gen.calls) == rollout.rounds
    sizes = [len(prompts) for prompts, _ in gen.calls]
    assert sizes[0] == 3
    assert max(sizes) == 3
    assert sum(sizes) == len(rollout.transitions)

    per_role = {role: Recording(hf) for role in ROLES}
    rollout = collect(make_envs(3), per_role, PARAMS, episodes(4), seed=3)
    assert rollout.generate_calls == {role: len(g.calls) for role, g in per_role.items()}
    assert all(len(g.calls) <= rollout.rounds for g in per_role.values())
    assert sum(len(p) for g in per_role.values() for p, _ in g.calls) == len(rollout.transitions)
    assert all(t.policy == t.role for t in rollout.transitions)
    for role, g in per_role.items():  # each policy only ever saw its own role's prompts
        assert all(role_of(hf.tokenizer.decode(p)) == role for prompts, _ in g.calls for p in prompts)


def test_rounds_batch_the_same_rows_every_run_however_long_steps_take(hf, make_envs):
    """Lock-step rounds: each generate call batches the same prompts on every run, so a seeded bf16 run
    (whose rows' log-probs move with the batch's make-up) repeats exactly. (With "async" the batches
    follow the steps' timing and this fails: checked when written.)"""
    import random
    import time

    def batches(jitter: random.Random) -> list:
        envs = make_envs(3)
        for env in envs:
            env.step = lambda action, step=env.step: (time.sleep(jitter.uniform(0, 0.05)), step(action))[1]
        gen = Recording(hf)
        collect(envs, gen, PARAMS, episodes(5), seed=4, schedule="rounds")
        return [prompts for prompts, _ in gen.calls]

    assert batches(random.Random(0)) == batches(random.Random(1))


def test_coach_failures_are_dropped_and_counted(hf, make_envs):
    envs = make_envs(2, coach=FailingVerifierCoach())
    rollout = collect(envs, hf, PARAMS, episodes(3), seed=4)
    assert rollout.dropped == 3
    assert [e.dropped for e in rollout.episodes] == [1, 1, 1]
    assert not [t for t in rollout.transitions if t.role == "verifier"]
    assert all(t.coach_ok for t in rollout.transitions)
    assert len(rollout.transitions) == sum(e.actions for e in rollout.episodes) - 3


def test_prompts_over_the_limit_are_not_generated_for(hf, make_envs):
    gen = Recording(hf)
    rollout = collect(make_envs(2), gen, PARAMS, episodes(2), max_prompt_tokens=10)
    assert gen.calls == []
    assert rollout.transitions == []
    assert rollout.overflow == 6
    assert len(rollout.episodes) == 2


def test_role_policy_must_cover_every_role(hf, make_envs):
    envs = make_envs(1)
    with pytest.raises(ValueError, match="roles without a policy: \\['verifier'\\]"):
        collect(envs, {"a": hf, "b": hf}, PARAMS, episodes(1),
                role_policy={"problem_solver": "a", "code_executor": "b"})
    with pytest.raises(ValueError, match="give role_policy"):
        collect(envs, {"a": hf, "b": hf}, PARAMS, episodes(1))


def test_continuation_tokenizes_only_the_new_messages(hf):
    tok = hf.tokenizer
    fmt = ChatFormat.of(tok)
    chat = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
            {"role": "user", "content": "Output of your code:\n[cell 1] ok\n42"}]
    tail = "<|im_start|>user\nOutput of your code:\n[cell 1] ok\n42<|im_end|>\n<|im_start|>assistant\n"
    after_stop = tok.encode("\n" + tail, add_special_tokens=False)
    assert fmt.next_prompt_ids([7], chat, 1, stop_token=tok.eos_token_id) == [7] + after_stop
    # an action cut at max_new_tokens has no stop token yet: the template's end of turn is added
    after_cut = tok.encode("<|im_end|>\n" + tail, add_special_tokens=False)
    assert fmt.next_prompt_ids([7], chat, 1, stop_token=None) == [7] + after_cut


def test_a_template_that_drops_history_is_refused(model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.chat_template = ("{% for m in messages[-1:] %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}assistant: {% endif %}")
    with pytest.raises(TemplateError, match="continuation=render"):
        ChatFormat.of(tok)


def test_merged_worker_rollouts_add_counts_and_keep_the_slowest_workers_times():
    """Ray mode's workers run side by side: their rollouts merge into one, in worker order."""
    from mappa_train.rollout import EpisodeStats, Rollout

    def part(k: int, seconds: float) -> Rollout:
        r = Rollout.empty()
        r.episodes = [EpisodeStats(k, f"t{k}", 1.0, True, 3, 0, False)]
        r.dropped, r.overflow, r.failed, r.rounds = k, 2 * k, 1, 3 + k
        r.generate_calls = {"shared": 2, f"p{k}": 1}
        r.generate_s, r.env_busy_s, r.wall_s = seconds, 2 * seconds, 3 * seconds
        return r

    merged = Rollout.merge([part(1, 5.0), part(2, 4.0)])
    assert [e.episode_id for e in merged.episodes] == [1, 2]
    assert (merged.dropped, merged.overflow, merged.failed, merged.rounds) == (3, 6, 2, 5)
    assert merged.generate_calls == {"shared": 4, "p1": 1, "p2": 1}
    assert merged.timing() == {"generate_s": 5.0, "env_busy_s": 10.0, "wall_s": 15.0}
    assert Rollout.merge([]) == Rollout.empty()
