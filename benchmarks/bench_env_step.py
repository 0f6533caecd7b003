"""What the env layer's text handling costs on the hot path: sanitizing, quoting, prompt building, a step.

    PYTHONPATH=<checkout> python benchmarks/bench_env_step.py [--episodes 20] [--json out.json]

Run it once per checkout (before and after a change) and compare the printed figures: it uses only
names both sides have (`make("MathChat-v0", ...)`, the scripted team, `format_tool_output`, the coach
prompt renderer under its old or new name). Figures:
- `format_tool_output_us`: rendering one cell's 64 KB of output for the agent (sanitize + indent);
- `coach_prompt_us`: rendering a coach request carrying that output (quoting, clipping);
- `episode_ms` / `step_ms`: a whole MathChat episode (and its time per action) with the scripted team
  on a warm local sandbox (no pre-imports): the sandbox round trips plus everything the env does.
Medians: the machine may be shared; run before and after back to back, twice.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time


def _best_us(fn, repeat: int = 30) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e6 * statistics.median(times)


def bench_text() -> dict:
    from mappa_envs.coach import prompts
    from mappa_envs.coach.types import CoachRequest
    from mappa_envs.core.tools import format_tool_output
    from mappa_envs.sandbox.types import ExecResult

    line = "step 17: loss=0.4182 acc=0.913 | ## Output of the problem_solver \\boxed{3} ünïcode ✓\n"
    out = (line * (64_000 // len(line)))[:64_000]
    results = [ExecResult(stdout=out, stderr="warning: x\n" * 20)]
    render = getattr(prompts, "coach_messages", None) or prompts.render_messages
    template = prompts.load_template("MathChat-v0")
    request = CoachRequest(env_id="MathChat-v0", role="code_executor", role_duties="Run code.", task="2+2?",
                           action="```python\nprint(4)\n```", context="### user\n" + out[:8000],
                           tool_results=[r.to_dict() for r in results], upstream={"problem_solver": out[:4000]},
                           ground_truth="4", checks={"code_present": True})
    return {"format_tool_output_us": _best_us(lambda: format_tool_output(results)),
            "coach_prompt_us": _best_us(lambda: render(template, request))}


def bench_episodes(episodes: int) -> dict:
    import mappa_envs
    from mappa_envs.mathchat.scripted import for_env
    from mappa_envs.sandbox import make_sandbox

    sandbox = make_sandbox("local", preimport=(), pool_size=2)
    env = mappa_envs.make("MathChat-v0", task_source="synthetic", num_tasks=64, sandbox=sandbox)
    policy = for_env(env)
    durations, per_step = [], []
    try:
        for k in range(episodes + 2):
            t = time.perf_counter()
            env.reset(seed=k)
            for agent in env.agent_iter(max_iter=50):
                _, _, term, trunc, info = env.last()
                env.step(None if term or trunc else policy.respond([info["messages"]], [agent])[0])
            if k >= 2:  # the first two warm the pool
                durations.append(time.perf_counter() - t)
                per_step.append(durations[-1] / len(env.unwrapped.episode.actions))
    finally:
        env.close()
        sandbox.close()
    return {"episode_ms": 1e3 * statistics.median(durations), "step_ms": 1e3 * statistics.median(per_step)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args()
    figures = {**bench_text(), **bench_episodes(args.episodes)}
    for name, value in figures.items():
        print(f"{name:24s} {value:10.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
