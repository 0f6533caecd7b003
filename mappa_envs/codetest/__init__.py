"""CodeTest-v0: Coder -> Test Writer -> Reviewer on HumanEval, judged by hidden tests on the host."""
from mappa_envs.codetest.env import CodeTestEnv, CodeTestScenario
from mappa_envs.codetest.tasks import Problem, load_problems

__all__ = ["CodeTestEnv", "CodeTestScenario", "Problem", "load_problems"]
