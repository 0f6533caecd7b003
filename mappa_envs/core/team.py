"""Team specs: who is on the team, what each one sees, and in which order they act, as data.

A spec is a YAML file or a dict:

    name: Review-v0                     # the env id transcripts and the coach see (default Team-v0)
    scenario: mathchat                  # a registered scenario, or "package.module:Class" (see below)
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

A spec is data. Its `name` and role names are identifiers (the name picks the coach's rubric among
the shipped ones, never a path); its YAML is plain data (`mappa_envs.yaml_data`: no aliases, no key
given twice); checking is near-linear in roles and edges, and a spec has at most MAX_ROLES roles. Its
`scenario` is the name of a registered scenario (`mappa_envs.registration.scenarios`) or a class
implementing the `Scenario` protocol, checked before anything is called (`teams.env.scenario_factory`);
nothing else a spec names is called while the env is made (`scripted`, for `mappa run`, must be a Python
function taking the env). Naming `package.module:ATTR` (a scenario class, `prompt_from`, `scripted`)
imports that module, so a spec is trusted as far as the modules it names are.
"""
from __future__ import annotations

import functools
import heapq
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from mappa_envs.core.records import Role
from mappa_envs.errors import SpecError
from mappa_envs.yaml_data import YamlDataError, plain_yaml, read_text

ROLE_KEYS = ("name", "prompt", "prompt_from", "tools", "max_actions", "sees", "kernel")
SPEC_KEYS = ("name", "description", "scenario", "scenario_args", "scripted", "roles", "start", "flow")
EDGE_KEYS = ("from", "to", "max_rounds", "signal")
MAX_ROLES = 1000  # checking grows faster than linearly past this (5,000 roles: 12 s)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_TEAM_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}(?:-v\d{1,4})?\Z")  # an env id: never a path
_TARGET = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*\Z")  # package.module:attr
_SIGNAL = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*\Z")


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
class _Graph:
    """The forward edges of a team, indexed once: each role's direct senders, and its ancestors and
    descendants as bit sets over the acting order (bit i: the role acting i-th)."""

    order: tuple[str, ...]
    position: dict[str, int]
    senders: dict[str, list[str]]
    ancestors: dict[str, int]
    descendants: dict[str, int]

    @classmethod
    def of(cls, order: Sequence[str], edges: Sequence[tuple[str, str]]) -> _Graph:
        """`order` must be a topological order of `edges` (each role after every role with an edge to it)."""
        bit = {n: 1 << i for i, n in enumerate(order)}
        senders: dict[str, list[str]] = {n: [] for n in order}
        receivers: dict[str, list[str]] = {n: [] for n in order}
        for a, b in edges:
            senders[b].append(a)
            receivers[a].append(b)
        ancestors: dict[str, int] = {}
        for n in order:
            ancestors[n] = functools.reduce(int.__or__, (ancestors[a] | bit[a] for a in senders[n]), 0)
        descendants: dict[str, int] = {}
        for n in reversed(order):
            descendants[n] = functools.reduce(int.__or__, (descendants[b] | bit[b] for b in receivers[n]), 0)
        return cls(tuple(order), {n: i for i, n in enumerate(order)}, senders, ancestors, descendants)

    def bit(self, name: str) -> int:
        return 1 << self.position[name]

    def members(self, bits: int) -> list[str]:
        """The roles of a bit set, in acting order."""
        found = []
        while bits:
            low = bits & -bits
            found.append(self.order[low.bit_length() - 1])
            bits ^= low
        return found


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

    @functools.cached_property
    def _graph(self) -> _Graph:
        return _Graph.of(self.names, self.edges)

    def upstream(self, role: str) -> list[str]:
        """Every role with a forward path to `role`, in acting order."""
        return self._graph.members(self._graph.ancestors[role])

    def downstream(self, role: str) -> list[str]:
        return self._graph.members(self._graph.descendants[role])

    def rerun(self, loop: Loop) -> list[str]:
        """The roles that act again when `loop` fires: its target, then whatever of its downstream leads
        to the sender, and the sender (roles on other branches keep their work)."""
        g = self._graph
        between = g.ancestors[loop.sender] & g.descendants[loop.to]
        return g.members(between | g.bit(loop.to) | g.bit(loop.sender))

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
        return self._description

    @functools.cached_property
    def _description(self) -> str:
        parts = []
        for role in self.roles:
            ups = self._graph.senders[role.name]
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
    data = _yaml_data(text, where)
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
    try:
        return read_text(path, "team spec"), str(path)
    except YamlDataError as e:
        raise SpecError(str(e)) from None


def _yaml_data(text: str, where: str) -> Any:
    """The spec's YAML as plain data (`mappa_envs.yaml_data`: no aliases, no repeated keys)."""
    try:
        return plain_yaml(text)
    except YamlDataError as e:
        raise SpecError(f"{where}: {e}") from None


def build_team(data: Mapping) -> Team:
    """Check a spec dict and build its `Team`; every mistake is one `SpecError` line. Near-linear in the
    roles and edges (plus the default `sees` lists it writes out)."""
    unknown = sorted(set(data) - set(SPEC_KEYS))
    if unknown:
        raise SpecError(f"unknown spec key(s) {unknown}; a spec has {list(SPEC_KEYS)}")
    name = data.get("name", "Team-v0")
    if not isinstance(name, str) or not _TEAM_NAME.match(name):
        raise SpecError(f"name must be an env id like 'MyTeam-v0' (letters, digits, _ and an optional -vN; "
                        f"it picks the coach's rubric, never a path), got {name!r}")
    raw_roles = data.get("roles")
    if not isinstance(raw_roles, Sequence) or isinstance(raw_roles, str) or not raw_roles:
        raise SpecError("roles must be a non-empty list of {name: ..., prompt: ...} entries")
    if len(raw_roles) > MAX_ROLES:
        raise SpecError(f"a team spec has at most {MAX_ROLES} roles, this one has {len(raw_roles)}; split the team")
    roles = [_parse_role(r, i) for i, r in enumerate(raw_roles)]
    names = [r.name for r in roles]
    dup = sorted(n for n, count in Counter(names).items() if count > 1)
    if dup:
        raise SpecError(f"duplicate role name(s) {dup}; every role needs its own name")
    known = set(names)
    edges, loops = _parse_flow(data.get("flow"), names, known)
    start = _names(data.get("start", [names[0]]), "start", names, known)
    graph = _Graph.of(_acting_order(names, edges), edges)
    reached = functools.reduce(int.__or__, (graph.descendants[s] | graph.bit(s) for s in set(start)), 0)
    lost = [n for n in names if not reached & graph.bit(n)]
    if lost:
        raise SpecError(f"role(s) {lost} can never act: no forward path from start {start} reaches them; "
                        "add a flow edge to them or list them in start")
    for loop in loops:
        if not graph.ancestors[loop.sender] & graph.bit(loop.to):
            raise SpecError(f"the loop {loop.sender} -> {loop.to} does not go back upstream: {loop.to} has no "
                            f"forward path to {loop.sender}; a loop returns work to an earlier role")
    by_name = {r.name: r for r in roles}
    loop_of = {lp.sender: lp for lp in loops}
    final = []
    for n in graph.order:
        r = by_name[n]
        sees = graph.members(graph.ancestors[n]) if r.sees is None else r.sees
        bad = [s for s in sees if s not in known]
        if bad:
            raise SpecError(f"role {n!r} sees unknown role(s) {bad}; the roles are {names}")
        if n in sees:
            raise SpecError(f"role {n!r} lists itself in sees; a role always has its own conversation")
        lp = loop_of.get(n)
        duties = r.duties if lp is None else r.duties + (
            f"\n\nTo send the work back to the {lp.to} for another round (at most {lp.max_rounds} time(s) per "
            f"task), write the word {lp.signal} in your last message; without it the work goes on.")
        final.append(replace(r, sees=tuple(sees), duties=duties))
    scenario, scripted = data.get("scenario"), data.get("scripted")
    if scenario is not None and not (isinstance(scenario, str) and (_NAME.match(scenario) or _TARGET.match(scenario))):
        raise SpecError(f"scenario must be a registered scenario's name or 'package.module:Class', got {scenario!r}")
    if scripted is not None and not (isinstance(scripted, str) and _TARGET.match(scripted)):
        raise SpecError(f"scripted must be 'package.module:callable', got {scripted!r}")
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

    if not isinstance(target, str) or not _TARGET.match(target):
        raise SpecError(f"role {role!r}: prompt_from must be 'package.module:ATTR', got {target!r}")
    return resolve(target, f"role {role!r}: prompt_from", SpecError)  # an attribute read, never a call


def _names(value: Any, what: str, names: list[str], known: set[str]) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, Sequence) or not items or not all(isinstance(v, str) for v in items):
        raise SpecError(f"{what} must be a role name or a non-empty list of them, got {value!r}")
    bad = [v for v in items if v not in known]
    if bad:
        raise SpecError(f"{what} names unknown role(s) {bad}; the roles are {names}")
    return list(items)


def _parse_flow(flow: Any, names: list[str], known: set[str]) -> tuple[list[tuple[str, str]], list[Loop]]:
    if flow is None:  # a chain in the order listed
        return list(zip(names, names[1:])), []
    if isinstance(flow, str) or not isinstance(flow, Sequence):
        raise SpecError(f"flow must be a list of {{from: ..., to: ...}} edges, got {type(flow).__name__}")
    edges: dict[tuple[str, str], None] = {}  # ordered and without repeats
    loops: list[Loop] = []
    senders: set[str] = set()
    for i, raw in enumerate(flow):
        if not isinstance(raw, Mapping) or "from" not in raw or "to" not in raw:
            raise SpecError(f"flow[{i}] must be a mapping with from: and to:, got {raw!r}")
        unknown = sorted(set(raw) - set(EDGE_KEYS))
        if unknown:
            raise SpecError(f"flow[{i}]: unknown key(s) {unknown}; an edge has {list(EDGE_KEYS)}")
        sources = _names(raw["from"], f"flow[{i}].from", names, known)
        targets = _names(raw["to"], f"flow[{i}].to", names, known)
        if "max_rounds" not in raw:
            if "signal" in raw:
                raise SpecError(f"flow[{i}]: signal only goes with max_rounds (a loop edge)")
            for a in sources:
                for b in targets:
                    if a == b:
                        raise SpecError(f"flow: {a} -> {a} is a cycle without a bound; give the edge max_rounds: N")
                    edges[(a, b)] = None
            continue
        bound, signal = raw["max_rounds"], raw.get("signal", "REVISE")
        if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
            raise SpecError(f"flow[{i}]: max_rounds must be an integer >= 1, got {bound!r}")
        if not isinstance(signal, str) or not _SIGNAL.match(signal):
            raise SpecError(f"flow[{i}]: signal must be one word (letters, digits, _ or -), got {signal!r}")
        if len(sources) != 1 or len(targets) != 1:
            raise SpecError(f"flow[{i}]: a loop goes from one role to one role, got {sources} -> {targets}")
        if sources[0] in senders:
            raise SpecError(f"flow[{i}]: {sources[0]} already has a loop; a role may send work back to one role")
        senders.add(sources[0])
        loops.append(Loop(sources[0], targets[0], bound, signal))
    return list(edges), loops


def _acting_order(names: list[str], edges: list[tuple[str, str]]) -> list[str]:
    """Kahn's topological sort, ties broken by the order listed; a leftover is a cycle without a bound."""
    listed = {n: i for i, n in enumerate(names)}
    receivers: dict[str, list[str]] = {n: [] for n in names}
    indegree = dict.fromkeys(names, 0)
    for a, b in edges:
        receivers[a].append(b)
        indegree[b] += 1
    ready = [listed[n] for n in names if indegree[n] == 0]  # a heap of listing positions (sorted: a heap)
    order: list[str] = []
    while ready:
        here = names[heapq.heappop(ready)]
        order.append(here)
        for b in receivers[here]:
            indegree[b] -= 1
            if indegree[b] == 0:
                heapq.heappush(ready, listed[b])
    if len(order) < len(names):
        placed = set(order)
        cycle = _a_cycle([n for n in names if n not in placed], edges)
        raise SpecError(f"flow has a cycle without a bound ({' -> '.join(cycle)}); mark the edge that goes "
                        "back with max_rounds: N to make it a loop")
    return order


def _a_cycle(stuck: list[str], edges: list[tuple[str, str]]) -> list[str]:
    in_stuck = set(stuck)
    sender = {}
    for a, b in edges:
        if a in in_stuck and b in in_stuck:
            sender.setdefault(b, a)
    path, on_path = [stuck[0]], {stuck[0]: 0}
    while True:  # every stuck role has a stuck predecessor, so walking back must repeat a role
        prev = sender[path[-1]]
        if prev in on_path:
            return (path[on_path[prev]:] + [prev])[::-1]
        on_path[prev] = len(path)
        path.append(prev)


def _role_dict(r: Role) -> dict:
    return {"name": r.name, "prompt": r.duties, "tools": r.tools, "max_actions": r.max_actions,
            "sees": list(r.sees), "kernel": r.kernel}


__all__ = ["Loop", "Team", "build_team", "load_team", "no_team_argument", "shipped_specs"]
