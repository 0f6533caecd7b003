"""Team specs: who is on the team, what each one sees, and in which order they act, as data.

A spec is a YAML file or a dict:

    name: Review-v0                     # the env id transcripts and the coach see (default Team-v0)
    scenario: mappa_envs.mathchat.env:make_scenario   # "module:callable(**scenario_args) -> Scenario"
    scenario_args: {num_tasks: 64}
    scripted: mappa_envs.mathchat.scripted:for_env    # optional: "module:callable(env, **kw)", a scripted team
    roles:
      - name: solver
        prompt: "You are ..."           # its system prompt, or prompt_from: "module:ATTR"
        tools: false                    # may run ```python blocks in the sandbox
        max_actions: 1                  # most actions in one turn
        sees: [planner]                 # whose output it is shown (default: every role upstream of it)
        kernel: main                    # the sandbox interpreter its code runs in
    start: [solver]                     # who acts first (default: the first role listed)
    flow:                               # default: a chain in the order listed
      - {from: planner, to: [solver_a, solver_b]}       # fan-out: both act, in turn
      - {from: [solver_a, solver_b], to: aggregator}    # fan-in
      - {from: aggregator, to: reviewer}
      - {from: reviewer, to: aggregator, max_rounds: 2} # a loop: sent back at most twice

Forward edges (no `max_rounds`) form a DAG; roles act in its topological order (ties: the order
listed). An edge with `max_rounds` is a loop: when the sender's last action of its turn says the
loop's `signal` (default REVISE, as a word), the roles from the target down to the sender act
again, at most `max_rounds` times per episode; the target is shown the sender's feedback. The env
tells the sender how (one sentence appended to its prompt). A spec is checked when it is loaded:
every mistake (a duplicate name, an unknown role in `sees` or `flow`, a cycle without a bound, a
role no path reaches) is one `SpecError` line.
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from mappa_envs.core.records import Role
from mappa_envs.errors import SpecError

ROLE_KEYS = ("name", "prompt", "prompt_from", "tools", "max_actions", "sees", "kernel")
SPEC_KEYS = ("name", "description", "scenario", "scenario_args", "scripted", "roles", "start", "flow")
EDGE_KEYS = ("from", "to", "max_rounds", "signal")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SIGNAL = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class Loop:
    """A bounded way back: `sender` may return the work to the upstream role `to`."""

    sender: str
    to: str
    max_rounds: int
    signal: str = "REVISE"

    def fires(self, text: str) -> bool:
        from mappa_envs.core.tools import strip_think

        return re.search(rf"(?<![\w-]){re.escape(self.signal)}(?![\w-])", strip_think(text)) is not None


@dataclass(frozen=True)
class Team:
    """A checked spec: roles in acting order, forward edges, loops, and the scenario it names."""

    name: str
    roles: tuple[Role, ...]  # in acting order (the topological order of the forward edges)
    edges: tuple[tuple[str, str], ...]
    loops: tuple[Loop, ...] = ()
    scenario: str | None = None
    scenario_args: dict = field(default_factory=dict)
    description: str = ""
    scripted: str | None = None  # "module:callable(env, **kw) -> TextPolicy": a scripted team for this spec

    @classmethod
    def chain(cls, roles: Sequence[Role], name: str = "Team-v0") -> Team:
        """The straight line a `Scenario` with its own `roles` always had."""
        names = [r.name for r in roles]
        return build_team({"name": name, "roles": [_role_dict(r) for r in roles],
                           "flow": [{"from": a, "to": b} for a, b in zip(names, names[1:])]})

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.roles]

    def upstream(self, role: str) -> list[str]:
        """Every role with a forward path to `role`, in acting order."""
        found, todo = set(), [role]
        while todo:
            here = todo.pop()
            for a, b in self.edges:
                if b == here and a not in found:
                    found.add(a)
                    todo.append(a)
        return [n for n in self.names if n in found]

    def downstream(self, role: str) -> list[str]:
        found, todo = set(), [role]
        while todo:
            here = todo.pop()
            for a, b in self.edges:
                if a == here and b not in found:
                    found.add(b)
                    todo.append(b)
        return [n for n in self.names if n in found]

    def rerun(self, loop: Loop) -> list[str]:
        """The roles that act again when `loop` fires: its target, then whatever of its downstream leads
        to the sender, and the sender (roles on other branches keep their work)."""
        before_sender = set(self.upstream(loop.sender))
        return [n for n in self.names if n == loop.to or n == loop.sender
                or (n in before_sender and n in self.downstream(loop.to))]

    def with_max_actions(self, max_actions: Mapping[str, int]) -> Team:
        """The team with some roles' `max_actions` replaced (an env argument that overrides the spec)."""
        unknown = sorted(set(max_actions) - set(self.names))
        if unknown:
            raise SpecError(f"{self.name}: no role(s) {unknown} to set max_actions of; the roles are {self.names}")
        return replace(self, roles=tuple(replace(r, max_actions=max_actions.get(r.name, r.max_actions))
                                         for r in self.roles))

    def describe(self) -> str:
        """The topology in words, for the coach prompt and `mappa envs`: the order, fan-in, what each
        role is shown, and the loops."""
        parts = []
        for role in self.roles:
            ups = [a for a, b in self.edges if b == role.name]
            shown = f"sees {', '.join(role.sees)}" if role.sees else "sees only the task"
            parts.append(f"{role.name} ({'after ' + ', '.join(ups) if ups else 'starts'}; {shown})")
        text = "Agents act in this order: " + " -> ".join(parts) + "."
        for loop in self.loops:
            text += (f" The {loop.sender} may send the work back to the {loop.to} up to {loop.max_rounds} "
                     f"time(s); then {', '.join(self.rerun(loop))} act again.")
        return text


def no_team_argument(env_id: str, scenario: str, kwargs: dict) -> None:
    """An env with a fixed team refuses `team=` in one line (instead of a TypeError) and says what works."""
    if "team" in kwargs:
        raise SpecError(f"{env_id} runs its own team; for another team use make('Team-v0', spec=..., "
                        f"scenario='{scenario}')")


def load_team(spec: str | os.PathLike | Mapping | Team) -> Team:
    """A `Team` from a YAML path, the name of a shipped spec ("mathchat", "dsbench", "review"), a dict,
    or a `Team` (returned as is)."""
    if isinstance(spec, Team):
        return spec
    if isinstance(spec, Mapping):
        return build_team(spec)
    if not isinstance(spec, (str, os.PathLike)):
        raise SpecError(f"spec must be a YAML path, a shipped spec name {shipped_specs()} or a dict, "
                        f"got {type(spec).__name__}")
    text, where = _spec_text(spec)
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpecError(f"{where}: not valid YAML: {' '.join(str(e).split())}") from None
    if not isinstance(data, Mapping):
        raise SpecError(f"{where}: a team spec is a mapping with roles: [...], got {type(data).__name__}")
    try:
        return build_team(data)
    except SpecError as e:
        raise SpecError(f"{where}: {e}") from None


def shipped_specs() -> list[str]:
    """The names of the specs shipped with the package (mappa_envs/teams/*.yaml)."""
    return sorted(p.name[:-5] for p in resources.files("mappa_envs.teams").iterdir() if p.name.endswith(".yaml"))


def _spec_text(spec: str | os.PathLike) -> tuple[str, str]:
    name = os.fspath(spec)
    if name in shipped_specs():
        return resources.files("mappa_envs.teams").joinpath(f"{name}.yaml").read_text(), f"spec {name!r}"
    path = Path(name).expanduser()
    if not path.is_file():
        raise SpecError(f"spec {name!r} is neither a YAML file nor a shipped spec ({', '.join(shipped_specs())})")
    return path.read_text(), str(path)


def build_team(data: Mapping) -> Team:
    """Check a spec dict and build its `Team`; every mistake is one `SpecError` line."""
    unknown = sorted(set(data) - set(SPEC_KEYS))
    if unknown:
        raise SpecError(f"unknown spec key(s) {unknown}; a spec has {list(SPEC_KEYS)}")
    name = data.get("name", "Team-v0")
    if not isinstance(name, str) or not name:
        raise SpecError(f"name must be a non-empty string, got {name!r}")
    raw_roles = data.get("roles")
    if not isinstance(raw_roles, Sequence) or isinstance(raw_roles, str) or not raw_roles:
        raise SpecError("roles must be a non-empty list of {name: ..., prompt: ...} entries")
    roles = [_parse_role(r, i) for i, r in enumerate(raw_roles)]
    names = [r.name for r in roles]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise SpecError(f"duplicate role name(s) {dup}; every role needs its own name")
    edges, loops = _parse_flow(data.get("flow"), names)
    start = _names(data.get("start", [names[0]]), "start", names)
    order = _acting_order(names, edges)
    reached = _reachable(start, edges)
    lost = [n for n in names if n not in reached]
    if lost:
        raise SpecError(f"role(s) {lost} can never act: no forward path from start {start} reaches them; "
                        "add a flow edge to them or list them in start")
    for loop in loops:
        if loop.to == loop.sender or loop.sender not in _reachable([loop.to], edges):
            raise SpecError(f"the loop {loop.sender} -> {loop.to} does not go back upstream: {loop.to} has no "
                            f"forward path to {loop.sender}; a loop returns work to an earlier role")
    sees_default = {n: [u for u in order if u in _upstream(n, edges)] for n in names}
    by_name = {r.name: r for r in roles}
    final = []
    for n in order:
        r = by_name[n]
        sees = sees_default[n] if r.sees is None else r.sees
        bad = [s for s in sees if s not in names]
        if bad:
            raise SpecError(f"role {n!r} sees unknown role(s) {bad}; the roles are {names}")
        if n in sees:
            raise SpecError(f"role {n!r} lists itself in sees; a role always has its own conversation")
        duties = r.duties + "".join(
            f"\n\nTo send the work back to the {lp.to} for another round (at most {lp.max_rounds} time(s) per "
            f"task), write the word {lp.signal} in your last message; without it the work goes on."
            for lp in loops if lp.sender == n)
        final.append(replace(r, sees=tuple(sees), duties=duties))
    scenario, scripted = data.get("scenario"), data.get("scripted")
    for key, value in (("scenario", scenario), ("scripted", scripted)):
        if value is not None and (not isinstance(value, str) or ":" not in value):
            raise SpecError(f"{key} must be 'package.module:callable', got {value!r}")
    args = data.get("scenario_args", {})
    if not isinstance(args, Mapping):
        raise SpecError(f"scenario_args must be a mapping of keyword arguments, got {type(args).__name__}")
    return Team(name, tuple(final), tuple(edges), tuple(loops), scenario, dict(args),
                str(data.get("description", "")), scripted)


def _parse_role(raw: Any, i: int) -> Role:
    if not isinstance(raw, Mapping):
        raise SpecError(f"roles[{i}] must be a mapping with name: and prompt:, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(ROLE_KEYS))
    if unknown:
        raise SpecError(f"roles[{i}]: unknown key(s) {unknown}; a role has {list(ROLE_KEYS)}")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise SpecError(f"roles[{i}]: name must be an identifier (letters, digits, _), got {name!r}")
    if ("prompt" in raw) == ("prompt_from" in raw):
        raise SpecError(f"role {name!r}: give exactly one of prompt: (the text) or prompt_from: ('module:ATTR')")
    prompt = raw["prompt"] if "prompt" in raw else _prompt_from(raw["prompt_from"], name)
    if not isinstance(prompt, str) or not prompt.strip():
        raise SpecError(f"role {name!r}: prompt must be non-empty text")
    tools = raw.get("tools", False)
    if not isinstance(tools, bool):
        raise SpecError(f"role {name!r}: tools must be true or false, got {tools!r}")
    max_actions = raw.get("max_actions", 1)
    if isinstance(max_actions, bool) or not isinstance(max_actions, int) or max_actions < 1:
        raise SpecError(f"role {name!r}: max_actions must be an integer >= 1, got {max_actions!r}")
    kernel = raw.get("kernel", "main")
    if not isinstance(kernel, str) or not _NAME.match(kernel):
        raise SpecError(f"role {name!r}: kernel must be an identifier, got {kernel!r}")
    sees = raw.get("sees")
    if sees is not None and (isinstance(sees, str) or not isinstance(sees, Sequence)
                             or not all(isinstance(s, str) for s in sees)):
        raise SpecError(f"role {name!r}: sees must be a list of role names, got {sees!r}")
    return Role(name, prompt, tools=tools, max_actions=max_actions,
                sees=None if sees is None else tuple(sees), kernel=kernel)  # type: ignore[arg-type]


def _prompt_from(target: Any, role: str) -> str:
    from mappa_envs.registration import resolve

    if not isinstance(target, str) or ":" not in target:
        raise SpecError(f"role {role!r}: prompt_from must be 'package.module:ATTR', got {target!r}")
    return resolve(target, f"role {role!r}: prompt_from", SpecError)


def _names(value: Any, what: str, names: list[str]) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, Sequence) or not items or not all(isinstance(v, str) for v in items):
        raise SpecError(f"{what} must be a role name or a non-empty list of them, got {value!r}")
    bad = [v for v in items if v not in names]
    if bad:
        raise SpecError(f"{what} names unknown role(s) {bad}; the roles are {names}")
    return list(items)


def _parse_flow(flow: Any, names: list[str]) -> tuple[list[tuple[str, str]], list[Loop]]:
    if flow is None:  # a chain in the order listed
        return list(zip(names, names[1:])), []
    if isinstance(flow, str) or not isinstance(flow, Sequence):
        raise SpecError(f"flow must be a list of {{from: ..., to: ...}} edges, got {type(flow).__name__}")
    edges: list[tuple[str, str]] = []
    loops: list[Loop] = []
    for i, raw in enumerate(flow):
        if not isinstance(raw, Mapping) or "from" not in raw or "to" not in raw:
            raise SpecError(f"flow[{i}] must be a mapping with from: and to:, got {raw!r}")
        unknown = sorted(set(raw) - set(EDGE_KEYS))
        if unknown:
            raise SpecError(f"flow[{i}]: unknown key(s) {unknown}; an edge has {list(EDGE_KEYS)}")
        sources, targets = _names(raw["from"], f"flow[{i}].from", names), _names(raw["to"], f"flow[{i}].to", names)
        if "max_rounds" not in raw:
            if "signal" in raw:
                raise SpecError(f"flow[{i}]: signal only goes with max_rounds (a loop edge)")
            edges += [(a, b) for a in sources for b in targets if (a, b) not in edges]
            continue
        bound, signal = raw["max_rounds"], raw.get("signal", "REVISE")
        if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
            raise SpecError(f"flow[{i}]: max_rounds must be an integer >= 1, got {bound!r}")
        if not isinstance(signal, str) or not _SIGNAL.match(signal):
            raise SpecError(f"flow[{i}]: signal must be one word (letters, digits, _ or -), got {signal!r}")
        if len(sources) != 1 or len(targets) != 1:
            raise SpecError(f"flow[{i}]: a loop goes from one role to one role, got {sources} -> {targets}")
        if any(lp.sender == sources[0] for lp in loops):
            raise SpecError(f"flow[{i}]: {sources[0]} already has a loop; a role may send work back to one role")
        loops.append(Loop(sources[0], targets[0], bound, signal))
    for a, b in edges:
        if a == b:
            raise SpecError(f"flow: {a} -> {a} is a cycle without a bound; give the edge max_rounds: N")
    return edges, loops


def _acting_order(names: list[str], edges: list[tuple[str, str]]) -> list[str]:
    """Kahn's topological sort, ties broken by the order listed; a leftover is a cycle without a bound."""
    indegree = {n: sum(1 for _, b in edges if b == n) for n in names}
    order: list[str] = []
    ready = [n for n in names if indegree[n] == 0]
    while ready:
        here = ready.pop(0)
        order.append(here)
        for a, b in edges:
            if a == here:
                indegree[b] -= 1
                if indegree[b] == 0:
                    ready.append(b)
        ready.sort(key=names.index)
    if len(order) < len(names):
        cycle = _a_cycle([n for n in names if n not in order], edges)
        raise SpecError(f"flow has a cycle without a bound ({' -> '.join(cycle)}); mark the edge that goes "
                        "back with max_rounds: N to make it a loop")
    return order


def _a_cycle(stuck: list[str], edges: list[tuple[str, str]]) -> list[str]:
    path = [stuck[0]]
    while True:  # every stuck role has a stuck predecessor, so walking back must repeat a role
        prev = next(a for a, b in edges if b == path[-1] and a in stuck)
        if prev in path:
            cycle = path[path.index(prev):] + [prev]
            return cycle[::-1]
        path.append(prev)


def _reachable(start: Sequence[str], edges: Sequence[tuple[str, str]]) -> set[str]:
    found, todo = set(start), list(start)
    while todo:
        here = todo.pop()
        for a, b in edges:
            if a == here and b not in found:
                found.add(b)
                todo.append(b)
    return found


def _upstream(role: str, edges: Sequence[tuple[str, str]]) -> set[str]:
    return _reachable([role], [(b, a) for a, b in edges]) - {role}


def _role_dict(r: Role) -> dict:
    return {"name": r.name, "prompt": r.duties, "tools": r.tools, "max_actions": r.max_actions,
            "sees": list(r.sees), "kernel": r.kernel}


__all__ = ["Loop", "Team", "build_team", "load_team", "no_team_argument", "shipped_specs"]
