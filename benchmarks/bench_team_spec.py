"""How long checking a team spec and making an env from it take, at sizes a careless or hostile spec reaches.

    python benchmarks/bench_team_spec.py [--repeats 3]

Cases: a 256-role chain spec (default `sees`: everyone upstream), a 60 -> 60 fan-out (3,600 edges)
behind one planner, `make("Chain-v0", depth=128)`, and the YAML of a 256-role spec parsed and checked.
Prints the best of `--repeats` wall times per case, in seconds. Target: each well under a second.
"""
from __future__ import annotations

import argparse
import time

import yaml

import mappa_envs
from mappa_envs.core.team import build_team, load_team


def role(name: str) -> dict:
    return {"name": name, "prompt": f"You are {name}."}


def chain_spec(n: int) -> dict:
    return {"name": "Long-v0", "roles": [role(f"r{i}") for i in range(n)]}


def fan_out_spec(width: int) -> dict:
    left, right = [f"a{i}" for i in range(width)], [f"b{i}" for i in range(width)]
    return {"name": "Wide-v0", "roles": [role("plan")] + [role(n) for n in left + right],
            "flow": [{"from": "plan", "to": left}, {"from": left, "to": right}]}


def best(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    text = yaml.safe_dump(chain_spec(256))

    def chain128():
        mappa_envs.make("Chain-v0", depth=128, num_tasks=4, sandbox="local").close()

    def from_yaml(tmp="/tmp/bench_team_spec.yaml"):
        with open(tmp, "w") as f:
            f.write(text)
        load_team(tmp)

    cases = {"256-role chain spec": lambda: build_team(chain_spec(256)),
             "60 -> 60 fan-out spec": lambda: build_team(fan_out_spec(60)),
             "make Chain-v0 depth 128": chain128,
             "256-role spec from YAML": from_yaml}
    for name, call in cases.items():
        print(f"{name:28s} {best(call, args.repeats):.3f} s")


if __name__ == "__main__":
    main()
