"""MathChat-v0: a Problem Solver, a Code Executor and a Verifier solve competition math together."""
from mappa_envs.mathchat.answers import answers_match, extract_answer, normalize_answer
from mappa_envs.mathchat.tasks import load_task_file, load_tasks, synthetic_tasks

__all__ = ["answers_match", "extract_answer", "load_task_file", "load_tasks", "normalize_answer", "synthetic_tasks"]


def __getattr__(name: str):  # MathChatEnv pulls in pettingzoo and the sandbox: load it on first use
    if name in ("MathChatEnv", "MathChatScenario"):
        from mappa_envs.mathchat import env

        return getattr(env, name)
    raise AttributeError(name)
