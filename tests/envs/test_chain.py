"""Chain-v0: one arithmetic step per agent, per-step checks, a sparse outcome; and the noisy rule coach."""
import asyncio
import contextlib
import io
import random

import pytest

import mappa_envs
from mappa_envs.chain.env import OPS, SPLITS, apply, chain_tasks
from mappa_envs.coach import CoachRequest
from mappa_envs.coach.config import CoachConfigError
from mappa_envs.coach.factory import make_coach
from mappa_envs.coach.noisy import NoisyCoach
from mappa_envs.coach.rule import RuleCoach
from mappa_envs.errors import EnvArgumentError
from tests.envs.test_golden_transcripts import play
from tests.pettingzoo_checks import api_and_seed_test


@pytest.mark.parametrize("depth", [2, 8, 32])
def test_api_and_seed_test(depth):
    api_and_seed_test(lambda: mappa_envs.make("Chain-v0", depth=depth, sandbox="local"), 2 * depth + 5)


def test_tasks_are_what_they_say():
    for task in chain_tasks(12, 30, seed=3):
        value = task.meta["start"]
        for op, k in task.meta["steps"]:
            value = apply(op, k, value)
            assert value >= 0
        assert str(value) == task.answer


def test_max_value_keeps_every_step_as_small_as_the_first():
    """Without it the values grow along the chain (a depth-8 chain's last step multiplies thousands); with it
    every step of every depth handles numbers in [0, max_value], and the default tasks stay as they were."""
    assert [t.answer for t in chain_tasks(8, 4, seed=3)] == ["2676", "2412", "718", "1280"]
    for split in SPLITS:
        for task in chain_tasks(8, 200, seed=3, split=split, max_value=99):
            value = task.meta["start"]
            for (op, k), stated in zip(task.meta["steps"], task.meta["values"]):
                value = apply(op, k, value)
                assert value == stated
                assert 0 <= value <= 99
    env = mappa_envs.make("Chain-v0", depth=8, max_value=20, sandbox="local")
    assert all(0 <= v <= 20 for t in env.unwrapped.scenario.tasks() for v in t.meta["values"])
    for bad in (19, 10_001, 50.0, True, "99"):
        with pytest.raises(EnvArgumentError, match=r"max_value must be an integer in \[20, 10000\]"):
            mappa_envs.make("Chain-v0", max_value=bad)


def actions(episode):
    return episode["transcript"]["actions"]


@pytest.mark.parametrize("view", ["all", "own"])
def test_perfect_team_always_succeeds_with_every_step_correct(view):
    episodes = play("Chain-v0", {"depth": 8, "num_tasks": 10, "view": view}, {"skill": 1.0, "code_rate": 0.5}, 6)
    assert all(e["transcript"]["outcome"]["correct"] for e in episodes)
    closing = [a for e in episodes for a in actions(e) if "step_correct" in a["checks"]]
    assert len(closing) == 6 * 8  # one value per agent per episode
    assert all(a["checks"]["step_correct"] for a in closing)
    assert any(a["tool_results"] for e in episodes for a in actions(e))  # the sandbox ran some steps


def test_the_own_view_shows_each_agent_its_step_and_nothing_of_the_others():
    (episode,) = play("Chain-v0", {"depth": 3, "num_tasks": 4, "view": "own"}, {"skill": 1.0}, 1)
    task = {t.id: t for t in chain_tasks(3, 4, seed=0)}[episode["transcript"]["task_id"]]
    steps = [OPS[op].format(k=n) for op, n in task.meta["steps"]]
    openings = {s["agent"]: s["messages"][1]["content"] for s in episode["steps"]}
    assert openings["step_1"] == f"Start value: {task.meta['start']}\nYour step (step 1 of 3): {steps[0]}"
    for k in (2, 3):
        task_part = openings[f"step_{k}"].split("\n\n## ", 1)[0]
        assert task_part == f"Your step (step {k} of 3): {steps[k - 1]}"
        assert "Output of the step_" + str(k - 1) in openings[f"step_{k}"]  # the value handed on still comes
    assert episode["transcript"]["outcome"]["correct"]


def test_one_bad_agent_is_blamed_locally():
    skill = [1.0] * 6
    skill[2] = 0.0  # step_3 always slips
    episodes = play("Chain-v0", {"depth": 6, "num_tasks": 10}, {"skill": skill}, 4)
    for e in episodes:
        verdict = {a["role"]: a["checks"]["step_correct"] for a in actions(e)}
        assert verdict == {f"step_{k}": k != 3 for k in range(1, 7)}  # later agents did their own step right
        assert e["transcript"]["outcome"]["correct"] is False
        assert e["transcript"]["outcome"]["first_wrong_step"] == "step_3"
        scores = {a["role"]: a["coach"]["score"] for a in actions(e)}
        assert scores["step_3"] < min(s for r, s in scores.items() if r != "step_3")


def test_outcome_gets_sparser_with_depth():
    rates = []
    for depth in (2, 16):
        episodes = play("Chain-v0", {"depth": depth, "num_tasks": 40}, {"skill": 0.9}, 30)
        rates.append(sum(e["transcript"]["outcome"]["score"] for e in episodes) / len(episodes))
    assert rates[0] > rates[1]


def run(env, texts):
    env.reset(seed=0)
    for agent in env.agent_iter():
        _, _, term, trunc, _ = env.last()
        env.step(None if term or trunc else texts(agent))
    return env.transcript()


def test_no_value_handed_on_excuses_the_next_agent():
    env = mappa_envs.make("Chain-v0", depth=3, sandbox="local")
    try:
        t = run(env, lambda agent: "I forgot." if agent == "step_1" else "\\boxed{5}")
    finally:
        env.close()
    checks = {a["role"]: a["checks"] for a in t["actions"]}
    assert checks["step_1"]["answer_present"] is False
    assert checks["step_2"]["inputs_ready"] is False
    assert "step_correct" not in checks["step_2"]
    assert checks["step_3"]["inputs_ready"] is True


def test_guessing_does_not_pass_a_step():
    env = mappa_envs.make("Chain-v0", depth=4, sandbox="local")
    try:  # a constant answer (-1: no step maps -1 to -1, and no task value is negative) never passes
        t = run(env, lambda agent: "\\boxed{-1}")
    finally:
        env.close()
    assert not any(a["checks"]["step_correct"] for a in t["actions"])
    assert t["outcome"]["correct"] is False


def test_bad_arguments():
    for kwargs, message in (({"depth": 0}, "depth must be"), ({"depth": 2.5}, "depth must be"),
                            ({"max_actions": 0}, "max_actions must be"), ({"view": "mine"}, "view='mine'")):
        with pytest.raises(EnvArgumentError, match=message):
            mappa_envs.make("Chain-v0", **kwargs)


def request(i: int) -> CoachRequest:
    return CoachRequest(env_id="Chain-v0", role=f"step_{i % 5 + 1}", role_duties="", task="t",
                        action=f"\\boxed{{{i}}}", checks={"answer_present": True, "step_correct": i % 2 == 0},
                        ask_answer_correct=True)


def test_noisy_coach_error_rate_and_flip():
    rule = RuleCoach()
    noisy = NoisyCoach(rule, 0.3, "flip", seed=1)
    reqs = [request(i) for i in range(2000)]
    corrupted = [noisy.score(r).score != rule.score(r).score for r in reqs]
    assert abs(sum(corrupted) / len(reqs) - 0.3) < 0.04
    for r in reqs[:50]:
        got, want = noisy.score(r), rule.score(r)
        assert got.score in (want.score, 10.0 - want.score)
    assert all(NoisyCoach(rule, 0.0).score(r) == rule.score(r) for r in reqs[:50])
    assert all(NoisyCoach(rule, 1.0).score(r).score == 10.0 - rule.score(r).score for r in reqs[:50])


def test_noisy_coach_is_seeded_by_content_not_order():
    reqs = [request(i) for i in range(200)]
    a = NoisyCoach(RuleCoach(), 0.5, "random", seed=4)
    b = NoisyCoach(RuleCoach(), 0.5, "random", seed=4)
    shuffled = reqs[:]
    random.Random(0).shuffle(shuffled)
    first = {id(r): a.score(r).score for r in reqs}
    assert all(b.score(r).score == first[id(r)] for r in shuffled)
    assert asyncio.run(a.ascore(reqs[3])).score == first[id(reqs[3])]
    other = NoisyCoach(RuleCoach(), 0.5, "random", seed=5)
    assert [other.score(r).score for r in reqs] != [first[id(r)] for r in reqs]


def test_noisy_rule_coach_spec():
    coach = make_coach("rule:noise=0.25,mode=random,seed=3")
    assert (coach.epsilon, coach.mode, coach.seed) == (0.25, "random", 3)
    for bad in ("rule:noise=2", "rule:mode=flip", "rule:noise=0.1,mode=sideways", "rule:nois=0.1"):
        with pytest.raises(CoachConfigError):
            make_coach(bad)
    episodes = play("Chain-v0", {"depth": 4, "num_tasks": 10, "coach": "rule:noise=1.0"}, {"skill": 1.0}, 2)
    assert all(a["coach"]["score"] == 1.0 for e in episodes for a in actions(e))  # 9 flipped


def test_blame_on_chain_rule_coach_is_exact_and_noise_lowers_it():
    from mappa_envs.coach_eval import blame

    coaches = {"rule": RuleCoach(), "noisy": make_coach("rule:noise=0.5,seed=2")}
    rows = blame.measure(["Chain-v0"], coaches, env_kwargs={"Chain-v0": {"num_tasks": 8}}, say=lambda m: None)
    exact = [r.precision for r in rows if r.coach == "rule" and r.faulty_role]
    noisy = [r.precision for r in rows if r.coach == "noisy" and r.faulty_role]
    assert exact == [1.0, 1.0, 1.0]
    assert sum(noisy) / len(noisy) < 0.9


def test_eval_split_is_disjoint_from_train():
    for depth in (1, 2, 8):
        train = {t.prompt for seed in (0, 1) for t in chain_tasks(depth, 300, seed=seed)}
        held = chain_tasks(depth, 50, seed=0, split="eval")
        assert len(held) == 50
        assert not train & {t.prompt for t in held}
    with pytest.raises(EnvArgumentError, match="split="):
        mappa_envs.make("Chain-v0", split="test")


def test_training_config_takes_chain_with_a_noisy_coach():
    from mappa_train.config import load_config
    from mappa_train.factories import make_coach as trainer_coach

    cfg = load_config(None, ["env.id=Chain-v0", "env.coach=rule:noise=0.2,mode=random", "env.kwargs={depth: 8}"])
    coach = trainer_coach(cfg)
    assert (coach.epsilon, coach.mode) == (0.2, "random")


def test_chain_eval_set_resolves_and_checks_overlap_against_its_train_split():
    from mappa_train.evaluation.evalsets import resolve
    from mappa_train.evaluation.runner import EvalSpecError

    es = resolve("chain:4:3")
    assert (es.env_id, es.env_kwargs) == ("Chain-v0", {"depth": 4, "split": "eval", "num_tasks": 3})
    assert es.train_kwargs == {"depth": 4, "split": "train"}
    for bad in ("chain:0", "chain:x", "chain:4:0"):
        with pytest.raises(EvalSpecError, match="chain:D"):
            resolve(bad)


def _scores(turn: list[str]) -> list[float]:
    """The rule coach's score of each of step_1's actions in one turn (depth 2, up to 3 actions)."""
    env = mappa_envs.make("Chain-v0", depth=2, num_tasks=1, max_actions=3, sandbox="local", coach="rule")
    try:
        env.reset(seed=0)
        scores = []
        for text in turn:
            env.step(text)
            scores.append(env.unwrapped.last_action.coach.score)
        return scores
    finally:
        env.close()


def test_the_honest_step_beats_every_hostile_action():
    """Per action, under the rule coach: the correct value beats any cell, a cell that computes the step
    beats filler and copies, and every hostile action scores clearly below 5."""
    task = chain_tasks(2, 1, seed=0)[0]
    start, (op, k) = task.meta["start"], task.meta["steps"][0]
    right = apply(op, k, start)
    assert right not in (start, k, 0)
    sign = {"add": "+", "sub": "-", "mul": "*"}[op]
    compute = f"```python\nprint({start} {sign} {k})\n```"
    honest = _scores([compute, f"The code printed {right}.\n\\boxed{{{right}}}"]) + _scores([f"\\boxed{{{right}}}"])
    hostile = {
        "filler cell": _scores(["```python\nprint(0)\n```"]),
        "filler cell beside the value": _scores([f"```python\nprint(0)\n```\n\\boxed{{{right}}}"]),
        "cell echoing the handed value": _scores([f"```python\nprint({start})\n```"]),
        "cell printing a copied number": _scores([f"```python\nprint({right})\n```"]),
        "a copied number respelled": _scores([f"```python\nprint({start} * 0 + int({right}.0))\n```"])
        + _scores([f"```python\nprint({start} * 0 + {hex(right)})\n```"]),
        "a copied number negated twice": _scores([f"```python\nprint(--{right})\n```"])
        + _scores([f"```python\nprint(abs(-{right}))\n```"]) + _scores([f"```python\nprint(int({right}.5))\n```"]),
        "a number too long to read": _scores(["```python\nprint('7' * 5000)\n```\n\\boxed{1}"]),
        "cell printing every number": _scores(["```python\nfor i in range(10_001):\n    print(i)\n```"]),
        "padding after computing": _scores([compute, compute])[1:],
        "echoing the handed value": _scores([f"\\boxed{{{start}}}"]),
        "a wrong value": _scores([f"\\boxed{{{right + 1}}}"]),
        "empty reply": _scores([""]),
        "repeating the problem": _scores([task.prompt]),
    }
    assert min(honest) >= 8.0, honest
    for name, scores in hostile.items():
        assert max(scores) < 5.0, (name, scores)


@pytest.mark.parametrize(("handed", "k", "op", "cells"), [
    (12, 5, "add", ["print(12 + 5)", "x = 12\nx += 5\nprint(x)", "print(f'{12 + 5}')",
                    "result = 12 + 5  # step 1\nprint('Result:', result)", "x = int('12')\nprint(x + 5)",
                    "x: int = 12\nprint(x + 5)"]),
    (2, 4, "sub", ["print(2 - 4)", "value = 2\nvalue -= 4\nprint(value)"]),  # -2: the handed value's sign
    (-12, 3, "mul", ["print(-12 * 3)", "x = 0 - 12\nprint(x * 3)"]),
    (10**400, 1, "sub", [f"x = {10**400}\nprint(x - 1)"]),  # a long value (a float check once overflowed)
])
def test_honest_cells_compute_the_step_however_they_are_written(handed, k, op, cells):
    from mappa_envs.chain.env import _computes
    from mappa_envs.sandbox.types import ExecResult

    value = apply(op, k, handed)
    for cell in cells:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(cell, {})  # the cells are ours: their output as the sandbox would print it
        assert _computes([cell], [ExecResult(stdout=out.getvalue())], value, (handed, k)), cell
    # a later cell of the turn using what an earlier one left in the kernel computes as well
    assert _computes(["print(x - 0)"], [ExecResult(stdout=f"{value}\n")], value, (handed, k))
