"""Real transcripts to review, made once per session: an eval run of Chain-v0's scripted team (the
`mappa eval` runner's format, with what each agent saw and sandbox output), a backprop-mode run in
`mappa run`'s format (blame shares), and a TranscriptRecorder file in which every agent writes
hostile text (script tags, a forged fence)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

HOSTILE = ('<script>document.title="pwned"</script>\n```\n</pre><img src=x onerror="document.title=\'pwned\'">'
           '{{ 7*7 }}\n\\boxed{3}')


def _eval_run(out: Path, reward_mode: str, episodes: int, skill: float, code_rate: float) -> Path:
    import mappa_envs
    from mappa_cli.args import load_factory
    from mappa_train.evaluation.runner import EvalSet, run_eval

    scripted = load_factory(mappa_envs.spec("Chain-v0").scripted_policy, "scripted policy")
    run_eval(lambda env: scripted(env, skill=skill, seed=0, code_rate=code_rate),
             [EvalSet("chain", "Chain-v0", max_problems=episodes)], out, k=1, seed=0, batch_size=2,
             env_kwargs={"reward_mode": reward_mode})
    return out / "transcripts.jsonl"


def _recording(path: Path, episodes: int, answer, **kwargs) -> Path:
    """Chain-v0 episodes through a TranscriptRecorder; `answer(messages, role)` writes each action."""
    import mappa_envs
    from mappa_envs.wrappers import TranscriptRecorder

    env = TranscriptRecorder(mappa_envs.make("Chain-v0", **kwargs), path)
    for seed in range(episodes):
        env.reset(seed=seed)
        for agent in env.agent_iter():
            _, _, terminated, truncated, info = env.last()
            env.step(None if terminated or truncated else answer(info["messages"], agent))
    env.close()
    return path


def _run_file(path: Path, episodes: int, answer, **kwargs) -> Path:
    """Chain-v0 episodes written as `mappa run` writes them: the env's own transcript once each ends."""
    import mappa_envs

    env = mappa_envs.make("Chain-v0", **kwargs)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for seed in range(episodes):
            env.reset(seed=seed)
            for agent in env.agent_iter():
                _, _, terminated, truncated, info = env.last()
                env.step(None if terminated or truncated else answer(info["messages"], agent))
            out.write(json.dumps({"episode": seed, "seed": seed, **env.unwrapped.transcript()}, default=str) + "\n")
    env.close()
    return path


def _scripted(skill: float):
    from mappa_envs.chain.scripted import ScriptedChainPolicy

    team = ScriptedChainPolicy(skill=skill, seed=0)
    return lambda messages, role: team.respond([messages], [role])[0]


@pytest.fixture(scope="session")
def made_runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("review-runs")
    _eval_run(root / "eval", "process", 6, 0.85, code_rate=0.5)
    _run_file(root / "backprop" / "step_3" / "transcripts.jsonl", 4, _scripted(0.6), reward_mode="backprop")
    _recording(root / "hostile" / "transcripts.jsonl", 2, lambda messages, role: HOSTILE)
    (root / "train").mkdir()
    (root / "train" / "metrics.jsonl").write_text("".join(
        json.dumps({"kind": kind, "step": s, "accuracy": s / 10 + (kind == "eval") * 0.05, "kl": 0.01 * s}) + "\n"
        for s in range(5) for kind in ("train", "eval")))
    return root


@pytest.fixture
def runs(made_runs, tmp_path) -> Path:
    """A private copy of the made runs (tests write verdict databases beside them)."""
    return Path(shutil.copytree(made_runs, tmp_path / "runs"))
