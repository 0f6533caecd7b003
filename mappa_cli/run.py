"""`mappa run ENV_ID`: play episodes with a policy and write one transcript per episode (JSON lines).

Episodes run through `VectorRunner` (`--batch-size` envs at once, one batched `respond` call per
round, env steps in a thread pool), all envs sharing one sandbox. Records are written as episodes
finish; each carries its `episode` number and `seed`, and each action the chat its agent answered.
An existing non-empty `--out` is refused unless `--overwrite` is given; the file is created (or
replaced) when the first episode ends, so a run that fails before leaves none. A `module:factory`
policy is held to the TextPolicy contract (`mappa_envs.policy.checked`).
"""
from __future__ import annotations

import argparse
import json
from contextlib import closing
from pathlib import Path

from mappa_cli.args import key_values, load_factory, positive_int, unit_float
from mappa_cli.errors import UsageError
from mappa_envs.core.pipeline import REWARD_MODES
from mappa_envs.sandbox.types import SANDBOX_BACKENDS


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("env_id", help="a registered id (see `mappa envs`)")
    parser.add_argument("--episodes", type=positive_int, default=4, help="episodes to play")
    parser.add_argument("--policy", default="scripted",
                        help="'scripted' (the env's built-in team), 'random' (random but well-formed actions "
                             "from the env's own vocabulary: answers, cells with the task's numbers and files), "
                             "or 'module:factory' called as factory(env) -> TextPolicy")
    parser.add_argument("--skill", type=unit_float, default=0.8,
                        help="scripted team: rate of correct first answers, in [0, 1]")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode (then +1 each)")
    parser.add_argument("--batch-size", type=positive_int, default=4, help="episodes played at once")
    parser.add_argument("--sandbox", default="local", choices=SANDBOX_BACKENDS)
    parser.add_argument("--preimport", help="comma-separated modules each sandbox interpreter imports before the "
                        "first cell ('' for none; default: the sandbox's data-science stack)")
    parser.add_argument("--reward-mode", default="process",
                        choices=REWARD_MODES)
    parser.add_argument("--out", type=Path, default=Path("runs/transcripts.jsonl"), help="JSON-lines output")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    parser.add_argument("--render", action="store_true", help="print each transcript")
    parser.add_argument("--no-progress", action="store_true", help="plain progress lines instead of a progress bar")
    parser.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="extra env kwargs, JSON-typed values (e.g. split=\"eval\", num_tasks=16)")


def run(args: argparse.Namespace) -> int:
    import mappa_envs
    from mappa_cli.progress import Progress
    from mappa_envs.sandbox import make_sandbox
    from mappa_envs.wrappers import VectorRunner
    from mappa_envs.wrappers.transcript import with_turns

    mappa_envs.spec(args.env_id)  # an unknown id fails here, before anything is built
    env_kwargs = _env_kwargs(args.env_arg)
    if args.out.is_file() and args.out.stat().st_size and not args.overwrite:
        raise UsageError(f"{args.out} already exists and is not empty; pass --overwrite to replace it, "
                         "or another --out")
    options = {} if args.preimport is None else {"preimport": tuple(filter(None, args.preimport.split(",")))}
    sandbox = make_sandbox(args.sandbox, pool_size=min(args.batch_size, args.episodes), **options)
    envs = []
    try:
        for _ in range(min(args.batch_size, args.episodes)):
            envs.append(mappa_envs.make(args.env_id, sandbox=sandbox, reward_mode=args.reward_mode, **env_kwargs))
        policy = _policy(envs[0], args)
        outcomes: list[dict] = []
        with closing(Lines(args.out)) as out, \
                Progress(args.episodes, args.env_id, bar=False if args.no_progress else None) as progress:

            def write(result, env) -> None:
                record = {"episode": result.episode, "seed": result.seed, **env.unwrapped.transcript(),
                          "returns": result.returns, **({"error": result.error} if result.error else {})}
                record["actions"] = with_turns(record.get("actions", []), result.turns)
                out.write(record)
                outcomes.append(record.get("outcome") or {})
                progress.episode(record)
                if args.render:
                    progress.say(env.unwrapped.render_text())

            jobs = [(args.seed + k, None) for k in range(args.episodes)]
            VectorRunner(envs, policy).play(jobs, on_episode=write)
    finally:
        for env in envs:
            env.close()
        sandbox.close()
    mean = sum(o.get("score", 0.0) for o in outcomes) / len(outcomes)
    correct = sum(bool(o.get("correct")) for o in outcomes)
    print(f"{args.episodes} episodes of {args.env_id}: mean outcome {mean:.3f}, "
          f"correct {correct}/{len(outcomes)}; transcripts in {args.out}")
    return 0


class Lines:
    """The JSON-lines --out file, created (an old one replaced) at its first record: a run that fails
    before any episode ends leaves no file behind, and an old file as it was."""

    def __init__(self, path: Path):
        self.path, self.file = path, None

    def write(self, record: dict) -> None:
        if self.file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.file = self.path.open("w", encoding="utf-8")
        self.file.write(json.dumps(record, default=str) + "\n")
        self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def _env_kwargs(pairs: list[str]) -> dict:
    kwargs = {}
    for key, value in key_values(pairs, "--env-arg", "num_tasks=16").items():
        try:
            kwargs[key] = json.loads(value)
        except json.JSONDecodeError:
            kwargs[key] = value  # a bare string
    return kwargs


def _policy(env, args: argparse.Namespace):
    import mappa_envs
    from mappa_envs.policy import checked

    if args.policy == "random":
        from mappa_envs.random_policy import RandomPolicy

        return RandomPolicy(env, seed=args.seed)
    if args.policy == "scripted":
        target = mappa_envs.spec(args.env_id).scripted_policy
        if target is None:
            raise UsageError(f"{args.env_id} has no scripted policy; use --policy random or module:factory")
        return load_factory(target, "scripted policy")(env, skill=args.skill, seed=args.seed)
    factory = load_factory(args.policy, "--policy", "expected 'scripted', 'random' or 'module:factory'")
    return checked(factory, f"--policy {args.policy}")(env)  # its errors are one line naming it
