"""The episode driver without a global barrier vs lock-step rounds, under uneven coach latency.

    python benchmarks/bench_driver.py [--quick] [--batch-sizes 8 32] [--episodes-per-env 3]

MathChat-v0 episodes on the local sandbox (the Code Executor runs a cell each episode). The coach is
the rule coach after a sleep drawn per action from a seeded log-uniform 0.05-2 s (an LLM coach's
round trip varies like that); the team is a seeded script behind a stand-in for batched generation
that costs 50 ms + 2 ms per prompt per call. Both schedules play the same episodes; the figures are
episodes/s for each and their ratio, measured side by side. A second pass with zero latency checks
that both schedules give identical episodes (same actions, rewards and outcomes).
"""
from __future__ import annotations

import argparse
import math
import random
import time
import zlib

import mappa_envs
from mappa_envs.coach.rule import RuleCoach
from mappa_envs.driver import Driver
from mappa_envs.mathchat import synthetic_tasks
from mappa_envs.mathchat.answers import extract_answer
from mappa_envs.sandbox import make_sandbox


class UnevenCoach:
    """The rule coach after a sleep fixed by the action (task, role, position): log-uniform in [lo, hi]."""

    def __init__(self, lo: float, hi: float, seed: int = 0):
        self.rule, self.lo, self.hi, self.seed = RuleCoach(), lo, hi, seed

    def latency(self, request) -> float:
        if self.hi <= 0:
            return 0.0
        key = f"{self.seed}/{request.task}/{request.role}/{request.action_index}/{len(request.context)}"
        u = random.Random(zlib.crc32(key.encode())).random()
        return math.exp(math.log(self.lo) + u * (math.log(self.hi) - math.log(self.lo)))

    def score(self, request):
        time.sleep(self.latency(request))
        return self.rule.score(request)

    async def ascore(self, request):
        return self.score(request)


class ScriptedTeam:
    """Seeded answers (right half the time) behind a fake batched-generation cost."""

    def __init__(self, tasks, per_call_s: float = 0.05, per_prompt_s: float = 0.002):
        self.by_prompt = {t.prompt: t for t in tasks}
        self.per_call_s, self.per_prompt_s = per_call_s, per_prompt_s

    def respond(self, conversations, roles, seeds):
        time.sleep(self.per_call_s + self.per_prompt_s * len(conversations))
        return [self._one(c, r, s) for c, r, s in zip(conversations, roles, seeds)]

    def _one(self, conversation, role, seed):
        user = conversation[1]["content"]
        if role == "problem_solver":
            task = self.by_prompt[user.removeprefix("Problem:\n").split("\n\n", 1)[0]]
            right = random.Random(seed).random() < 0.5
            return f"So the answer is \\boxed{{{task.answer if right else 1}}}"
        if role == "code_executor":
            if conversation[-1]["content"].startswith("Output of your code"):
                return "The code printed it: \\boxed{" + (extract_answer(user) or "0") + "}"
            return f"```python\nprint({extract_answer(user) or 0!r})\n```"
        return f"Checked: \\boxed{{{extract_answer(user) or 0}}}"


def play(schedule: str, b: int, episodes: int, coach, sandbox, tasks) -> tuple[float, list]:
    envs = [mappa_envs.make("MathChat-v0", tasks=tasks, sandbox=sandbox, coach=coach) for _ in range(b)]
    try:
        driver = Driver(envs, ScriptedTeam(tasks), schedule=schedule)
        t0 = time.perf_counter()
        results = sorted(driver.play([(k, {"task_index": k % len(tasks)}) for k in range(episodes)]),
                         key=lambda r: r.episode)
        return time.perf_counter() - t0, results
    finally:
        for env in envs:
            env.close()


def fingerprint(results) -> list:
    return [(r.task_id, [(t.role, t.action, t.reward) for t in r.turns], r.outcome) for r in results]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="B = 4 and 8, 2 episodes per env")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--episodes-per-env", type=int, default=3)
    ap.add_argument("--latency", type=float, nargs=2, default=[0.05, 2.0], metavar=("LO", "HI"))
    args = ap.parse_args()
    sizes = [4, 8] if args.quick else args.batch_sizes
    per_env = 2 if args.quick else args.episodes_per_env
    tasks = synthetic_tasks(64, seed=0)
    sandbox = make_sandbox("local", pool_size=max(sizes), preimport=())
    sandbox.wait_warm()
    try:
        print(f"coach latency log-uniform {args.latency[0]}-{args.latency[1]} s per action (seeded); "
              f"fake generation 50 ms + 2 ms/prompt per call; {per_env} episodes per env")
        print(f"{'B':>3} {'episodes':>8} {'rounds ep/s':>11} {'async ep/s':>10} {'async/rounds':>12}")
        for b in sizes:
            coach = UnevenCoach(*args.latency)
            wall_rounds, _ = play("rounds", b, b * per_env, coach, sandbox, tasks)
            wall_async, _ = play("async", b, b * per_env, coach, sandbox, tasks)
            n = b * per_env
            print(f"{b:>3} {n:>8} {n / wall_rounds:>11.2f} {n / wall_async:>10.2f} {wall_rounds / wall_async:>11.2f}x")
        same = fingerprint(play("rounds", sizes[0], 2 * sizes[0], UnevenCoach(0, 0), sandbox, tasks)[1]) == \
            fingerprint(play("async", sizes[0], 2 * sizes[0], UnevenCoach(0, 0), sandbox, tasks)[1])
        print(f"zero latency, B={sizes[0]}: async and rounds give identical episodes: {same}")
    finally:
        sandbox.close()


if __name__ == "__main__":
    main()
