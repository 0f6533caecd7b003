"""TranscriptRecorder: write every episode of an AEC env as one JSON line.

A line holds the env id, task id and seed, then each action in order — the role, the chat messages it
answered, its text, the reward the wrapped env paid for it and the env's record (tool results,
checks, coach verdict) — then the outcome and every role's return. Put it outermost to record the
rewards a trainer sees, innermost to record the raw coach rewards. An episode is written when it
ends; one cut off by `reset()` or `close()` is written with `"finished": false`.

`with_turns` does the same for the records the episode driver's users write (`mappa run`,
`mappa eval`): each action of `env.transcript()` gets the chat its agent answered.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from itertools import zip_longest
from pathlib import Path
from typing import IO, Any

from pettingzoo.utils.wrappers import BaseWrapper

from mappa_envs.core.untrusted import sanitized

_WRITE_LOCK = threading.Lock()  # recorders stepped from several threads may share one file


class TranscriptRecorder(BaseWrapper):
    """Append one JSON line per episode to `path` (a file path or an open text file).

    >>> import io, json, mappa_envs
    >>> from mappa_envs.wrappers import TranscriptRecorder
    >>> out = io.StringIO()
    >>> env = TranscriptRecorder(mappa_envs.make("MathChat-v0", task_source="synthetic"), out)
    >>> env.reset(seed=0)
    >>> for agent in env.agent_iter():
    ...     _, _, terminated, truncated, _ = env.last()
    ...     env.step(None if terminated or truncated else "The answer is \\\\boxed{7}.")
    >>> line = json.loads(out.getvalue())
    >>> [a["role"] for a in line["actions"]], line["finished"], "correct" in line["outcome"]
    (['problem_solver', 'code_executor', 'verifier'], True, True)
    >>> env.close()
    """

    def __init__(self, env, path: str | Path | IO[str]):
        super().__init__(env)
        if isinstance(path, (str, Path)):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._file, self._owns_file = open(path, "a", encoding="utf-8"), True
        else:
            self._file, self._owns_file = path, False
        self._episode: dict | None = None

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._flush()
        self.env.reset(seed=seed, options=options)
        first = self.env.agents[0]
        self._episode = {"env_id": self.env.metadata.get("name"), "task_id": self.env.infos[first].get("task_id"),
                         "seed": seed, "finished": False, "truncated": False, "actions": [], "outcome": None,
                         "returns": {a: 0.0 for a in self.env.agents}}

    def step(self, action: Any) -> None:
        env, ep = self.env, self._episode
        agent = env.agent_selection
        live = ep is not None and not (env.terminations[agent] or env.truncations[agent])
        messages = list(env.infos[agent].get("messages", [])) if live else None
        env.step(action)
        if ep is None:  # not reset yet, or the episode was already written
            return
        for a, r in env.rewards.items():
            ep["returns"][a] = ep["returns"].get(a, 0.0) + float(r)
        if live:
            ep["actions"].append({"role": agent, "messages": messages, "action": action,
                                  "reward": float(env.rewards.get(agent, 0.0)),
                                  "record": env.infos[agent].get("action")})
        if env.agents and all(env.terminations[a] or env.truncations[a] for a in env.agents):
            ep["finished"] = True
            ep["truncated"] = any(env.truncations[a] for a in env.agents)
            ep["outcome"] = env.infos[agent].get("outcome")
            self._flush()

    def close(self) -> None:
        self._flush()
        if self._owns_file:
            self._file.close()
        self.env.close()

    def _flush(self) -> None:
        """Write the current episode (if it has any action) once."""
        ep, self._episode = self._episode, None
        if ep is not None and ep["actions"]:
            line = json.dumps(sanitized(ep), default=_jsonable, ensure_ascii=False) + "\n"  # valid UTF-8 always
            with _WRITE_LOCK:
                self._file.write(line)
                self._file.flush()


def _jsonable(x: Any) -> Any:
    """numpy scalars and arrays (in outcome details, say) as plain numbers and lists; anything else as text."""
    if hasattr(x, "tolist"):
        return x.tolist()
    return str(x)


def with_turns(actions: list[dict], turns: Sequence) -> list[dict]:
    """The action records of `env.transcript()`, each with what the driver's `Turn` for it knows: the
    whole chat its agent answered (`messages`), its last message (`seen`), the answer's length and the
    policy's token usage. An action without a turn (its step raised) is kept as it is."""
    return [action if turn is None else {**action, **_turn_fields(turn)}
            for action, turn in zip_longest(actions, list(turns)[:len(actions)])]


def _turn_fields(turn) -> dict:
    messages = [dict(m) for m in turn.messages]
    return {"messages": messages, "seen": messages[-1]["content"] if messages else "", "chars": len(turn.action),
            **({"usage": turn.usage} if turn.usage else {})}
