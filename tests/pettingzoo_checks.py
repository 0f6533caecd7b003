"""PettingZoo's own checkers over envs that `make_env()` builds, closing every env they used."""
from collections.abc import Callable

from pettingzoo.test import api_test, seed_test


def api_and_seed_test(make_env: Callable, api_cycles: int, seed_cycles: int = 10) -> None:
    envs = []

    def make():
        envs.append(make_env())
        return envs[-1]

    try:
        api_test(make(), num_cycles=api_cycles)
        seed_test(make, num_cycles=seed_cycles)
    finally:
        for env in envs:
            env.close()
