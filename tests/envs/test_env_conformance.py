"""Every registered environment passes PettingZoo's own conformance tests, unmodified."""
import pytest
from pettingzoo.test import api_test, seed_test

import mappa_envs

ENV_IDS = sorted(mappa_envs.registry)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_api_test(env_id):
    env = mappa_envs.make(env_id, sandbox="local")
    try:
        api_test(env, num_cycles=30)
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_seed_test(env_id):
    envs = []

    def make():
        envs.append(mappa_envs.make(env_id, sandbox="local"))
        return envs[-1]

    try:
        seed_test(make, num_cycles=10)
    finally:
        for env in envs:
            env.close()
