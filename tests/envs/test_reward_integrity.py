"""The MathChat reward pays for the work, tried as a policy paid for every hole would (issue 21).

Real MathChat-v0 envs (local sandbox; the executor's cases on Docker too; rule coach), hand-made
actions: boxing the question scores 0, copying is worth less than computing, ending the turn with
the report beats padding it, and no answer stalls the process.
"""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

import mappa_envs
from mappa_envs.core.pipeline import Task
from mappa_envs.mathchat import synthetic_tasks
from mappa_envs.mathchat.scripted import ScriptedMathPolicy
from tests.sandbox_helpers import BACKENDS, require_docker

TASK = Task(id="t1", prompt="What is $4 \\cdot 7 + 3$?", answer="31")
COMPUTE = "```python\nprint(4 * 7 + 3)\n```"


def play(script: dict[str, list[str]], task: Task = TASK, executor_max_actions: int = 3, sandbox: str = "local"):
    """Play one episode with `script[role]`'s actions in order; returns (per-action (role, reward,
    checks), the episode's outcome dict)."""
    if sandbox == "docker":
        require_docker()
    env = mappa_envs.make("MathChat-v0", tasks=[task], sandbox=sandbox, executor_max_actions=executor_max_actions)
    queues = {a: list(v) for a, v in script.items()}
    steps, outcome = [], None
    try:
        env.reset(seed=0)
        for agent in env.agent_iter(max_iter=50):
            _, _, terminated, truncated, info = env.last()
            if terminated or truncated:
                outcome = info.get("outcome")
                env.step(None)
                continue
            env.step(queues[agent].pop(0))
            steps.append((agent, env.rewards[agent], env.infos[agent]["action"]["checks"]))
    finally:
        env.close()
    return steps, outcome


def executor_rewards(executor: list[str], sandbox: str = "local") -> list[float]:
    steps, _ = play({"problem_solver": ["\\boxed{31}"], "code_executor": executor, "verifier": ["\\boxed{31}"]},
                    sandbox=sandbox)
    return [r for role, r, _ in steps if role == "code_executor"]


# ---- 1. an answer is the answer, not the question -------------------------------------------------

BOXED_QUESTION = {"problem_solver": ["We need $4 \\cdot 7 + 3$. \\boxed{4 \\cdot 7 + 3}"],
                  "code_executor": ["No code needed: \\boxed{4 \\cdot 7 + 3}"],
                  "verifier": ["The team agrees: \\boxed{4 \\cdot 7 + 3}"]}


def test_a_team_that_boxes_the_question_scores_zero_and_is_not_paid_as_right():
    steps, outcome = play(BOXED_QUESTION)
    assert (outcome["score"], outcome["correct"], outcome["predicted"]) == (0.0, False, "4 \\cdot 7 + 3")
    verifier = steps[-1]
    assert verifier[2] == {"answer_present": True, "answer_correct": False}
    honest, _ = play({**BOXED_QUESTION, "verifier": ["\\boxed{31}"]})
    assert verifier[1] == 5 + 0.5 - 3.5 < honest[-1][1] == 5 + 0.5 + 3.5
    executor = steps[1]
    assert executor[2]["answer_correct"] is False
    assert executor[1] < 5


@pytest.mark.parametrize("family", ["product_sum", "digit_product_sum"])
def test_boxing_the_question_scores_zero_on_the_synthetic_families(family):
    """The two families behind the published quickstart figures: before, this policy scored 100%."""
    tasks = synthetic_tasks(12, seed=0, families=[family])
    env = mappa_envs.make("MathChat-v0", tasks=tasks, sandbox="local")
    boxed_question, honest = [], []
    try:
        for policy, correct in ((BoxTheQuestion(), boxed_question), (ScriptedMathPolicy(tasks), honest)):
            for i in range(len(tasks)):
                env.reset(options={"task_index": i})
                for agent in env.agent_iter():
                    _, _, term, trunc, info = env.last()
                    env.step(None if term or trunc else policy.respond([info["messages"]], [agent])[0])
                correct.append(env.unwrapped.outcome.correct)
                assert env.unwrapped.outcome.details["predicted"]  # what was counted is on record
    finally:
        env.close()
    assert sum(boxed_question) == 0
    assert all(honest)


class BoxTheQuestion:
    """Runs no code: every role boxes the problem's own expression."""

    def respond(self, conversations, roles):
        out = []
        for conversation in conversations:
            user = next(m["content"] for m in conversation if m["role"] == "user")
            expression = re.search(r"What is (.+?)\?", user).group(1)
            out.append(f"\\boxed{{{expression}}}")
        return out


# ---- 4. the executor's honest path is strictly best -----------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_computing_beats_copying_the_solvers_number(backend):
    computed = executor_rewards([COMPUTE, "It printed 31. \\boxed{31}"], backend)
    for copy in ("print(31)", "x = 31\nprint(x)", "print('31')", "print(32 - 1)", "print(int('3' + '1'))",
                 "print(3_1)", "print(31.0)"):
        copied = executor_rewards([f"```python\n{copy}\n```", "It printed 31. \\boxed{31}"], backend)
        assert computed[0] > copied[0], copy
        assert computed[1] > copied[1], copy  # the report of a copied number is worth less too
    assert computed == [9.5, 10.0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_ending_the_turn_with_the_report_beats_padding(backend):
    report = executor_rewards([COMPUTE, "It printed 31. \\boxed{31}"], backend)
    for pad in (COMPUTE, "```python\nprint(7 * 4 + 3)\n```", "```python\nprint('checking')\n```",
                "```python\nprint(4 * 7 + 3)\nprint(4 * 7 + 3)\n```"):
        padded = executor_rewards([COMPUTE, pad, "It printed 31. \\boxed{31}"], backend)
        assert padded[0] == report[0]
        assert report[1] > padded[1], pad  # at the decision point, reporting strictly beats another cell
        assert padded[1] <= 2.5
    steps, _ = play({"problem_solver": ["\\boxed{31}"], "code_executor": [COMPUTE, COMPUTE, COMPUTE],
                     "verifier": ["\\boxed{31}"]}, sandbox=backend)
    assert [c.get("new_work") for role, _, c in steps if role == "code_executor"] == [None, False, False]


def test_a_number_copied_in_an_earlier_cell_is_still_copied():
    """The interpreter persists: `x = 31` in one cell and `print(x + 0 * 4)` in the next is a copy."""
    steps, _ = play({"problem_solver": ["\\boxed{31}"],
                     "code_executor": ["```python\nx = 31\n```", "```python\nprint(x + 0 * 4)\n```", "\\boxed{31}"],
                     "verifier": ["\\boxed{31}"]})
    executor = [c for role, _, c in steps if role == "code_executor"]
    assert executor[1]["printed_answer_correct"] is False
    assert executor[2]["answer_computed"] is False


def test_work_before_the_answer_is_not_padding():
    steps, _ = play({"problem_solver": ["\\boxed{31}"],
                     "code_executor": ["```python\nx = 4 * 7\nprint(x)\n```", "```python\nprint(x + 3)\n```",
                                       "\\boxed{31}"],
                     "verifier": ["\\boxed{31}"]})
    executor = [(r, c) for role, r, c in steps if role == "code_executor"]
    assert executor[1][1] == {"code_present": True, "new_work": True, "printed_answer_correct": True}
    assert [r for r, _ in executor] == [7.5, 9.5, 10.0]


def test_a_report_without_code_is_worth_less_than_computing():
    no_code = executor_rewards(["The solver is right: \\boxed{31}"])
    assert no_code == [5 - 1.0 + 0.5 + 3.5]  # no code (-1), an answer (+0.5), right (+3.5), computed by nobody (+0)
    assert no_code[0] < executor_rewards([COMPUTE, "\\boxed{31}"])[0]


# ---- 2. no string stalls the process --------------------------------------------------------------

STALL = textwrap.dedent("""
    import mappa_envs
    from mappa_envs.driver import Driver
    from mappa_envs.mathchat import synthetic_tasks
    from mappa_envs.mathchat.scripted import ScriptedMathPolicy

    tasks = synthetic_tasks(6, seed=0, families=["product_sum"])
    HOSTILE = "\\\\boxed{1e99999999999}"
    CELL = "```python\\nprint('1e99999999999')\\nprint('1E99999999999')\\nprint('9' * 200_000)\\n```"

    class Team(ScriptedMathPolicy):
        def respond(self, conversations, roles, seeds=None):
            out = super().respond(conversations, roles, seeds)
            return [(CELL if r == "code_executor" and len(c) == 2 else HOSTILE) if tasks[0].prompt in c[1]["content"]
                    else o for c, r, o in zip(conversations, roles, out)]

    envs = [mappa_envs.make("MathChat-v0", tasks=tasks, sandbox="local") for _ in range(6)]
    results = list(Driver(envs, Team(tasks)).play([(0, {"task_index": i}) for i in range(6)]))
    for env in envs:
        env.close()
    print(sorted((r.task_id, bool(r.outcome and r.outcome.correct), r.error) for r in results))
""")


def test_a_huge_exponent_in_an_answer_stalls_nothing():
    """`\\boxed{1e99999999999}` once made Fraction() compute 10**exp holding the GIL: no episode
    finished. Here one episode's executor prints such numbers (and a 200k-digit one) and every role
    boxes one; the five healthy episodes finish. In a child process with a generous limit, so a
    regression fails instead of hanging."""
    out = subprocess.run([sys.executable, "-c", STALL], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    results = eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 -- our own child's repr of plain tuples
    assert len(results) == 6
    assert [ok for _, ok, err in results if err is None].count(True) == 5
    assert all(err is None for _, _, err in results)
