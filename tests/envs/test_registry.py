"""The env registry: make/register/spec, PettingZoo's registry, and light imports."""
import subprocess
import sys

import pettingzoo
import pytest

import mappa_envs
from mappa_envs.core.pipeline import PipelineEnv

pytestmark = pytest.mark.unit


def test_registered_ids_and_specs():
    assert {"MathChat-v0", "DSBench-v0"} <= set(mappa_envs.registry)
    spec = mappa_envs.spec("MathChat-v0")
    assert spec.id == "MathChat-v0"
    assert spec.description


def test_unknown_id_lists_registered_ids():
    with pytest.raises(KeyError, match="unknown env id 'MathChat-v9'.*MathChat-v0"):
        mappa_envs.make("MathChat-v9")


@pytest.mark.parametrize("bad", ["MathChat", "mathchat v0", "-v0", "Math Chat-v0"])
def test_register_rejects_unversioned_ids(bad):
    with pytest.raises(ValueError, match="must look like"):
        mappa_envs.register(bad, "mappa_envs.mathchat.env:MathChatEnv")


def test_register_custom_env_with_defaults_and_pettingzoo_make():
    mappa_envs.register("TinyMath-v0", "mappa_envs.mathchat.env:MathChatEnv", description="two tasks",
                        num_tasks=2, task_seed=7)
    try:
        env = mappa_envs.make("TinyMath-v0", sandbox="local")
        assert isinstance(env, PipelineEnv)
        assert len(env.scenario.tasks()) == 2
        env.close()
        env = mappa_envs.make("TinyMath-v0", sandbox="local", num_tasks=3)  # caller overrides defaults
        assert len(env.scenario.tasks()) == 3
        env.close()
        env = pettingzoo.make("aec", "mappa/TinyMath-v0", sandbox="local")
        assert isinstance(env, PipelineEnv)
        assert env.possible_agents == ["problem_solver", "code_executor", "verifier"]
        env.close()
    finally:
        mappa_envs.registry.pop("TinyMath-v0")


def test_import_is_light():
    code = ("import sys, mappa_envs, mappa_envs.mathchat, mappa_envs.sandbox, mappa_envs.coach; "
            "print(sorted(m for m in ('torch', 'ray', 'vllm', 'deepspeed', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_register_namespaced_id():
    mappa_envs.register("myorg/TinyMath-v1", "mappa_envs.mathchat.env:MathChatEnv", num_tasks=2)
    try:
        env = pettingzoo.make("aec", "myorg/TinyMath-v1", sandbox="local")
        assert len(env.scenario.tasks()) == 2
        env.close()
    finally:
        mappa_envs.registry.pop("myorg/TinyMath-v1")
