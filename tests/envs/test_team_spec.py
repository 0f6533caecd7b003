"""Team specs: checked at make() time, run in the order they say, loops bounded, shipped specs unchanged."""
import copy

import pytest

import mappa_envs
from mappa_envs.core.team import build_team, load_team, shipped_specs
from mappa_envs.errors import SpecError
from tests.envs.test_golden_transcripts import play
from tests.pettingzoo_checks import api_and_seed_test


def role(name, **kw):
    return {"name": name, "prompt": f"You are the {name}. End with \\boxed{{ANSWER}}.", **kw}


FAN_IN = {
    "name": "FanIn-v0",
    "scenario": "mappa_envs.mathchat.env:make_scenario",
    "scenario_args": {"num_tasks": 8},
    "roles": [role("lead"), role("a", tools=True), role("b"), role("agg", sees=["a", "b"]), role("review")],
    "flow": [{"from": "lead", "to": ["a", "b"]}, {"from": ["a", "b"], "to": "agg"}, {"from": "agg", "to": "review"},
             {"from": "review", "to": "a", "max_rounds": 2}],
}


def with_(spec, **changes):
    out = copy.deepcopy(spec)
    out.update(changes)
    return out


@pytest.mark.parametrize("spec, message", [
    (with_(FAN_IN, roles=FAN_IN["roles"] + [role("a")]), "duplicate role name(s) ['a']"),
    (with_(FAN_IN, roles=[role("lead", sees=["ghost"])] + FAN_IN["roles"][1:]), "sees unknown role(s) ['ghost']"),
    (with_(FAN_IN, flow=FAN_IN["flow"][:3] + [{"from": "review", "to": "a"}]), "cycle without a bound"),
    (with_(FAN_IN, flow=[{"from": "lead", "to": "a"}, {"from": "a", "to": "agg"}, {"from": "agg", "to": "review"}]),
     "['b'] can never act"),
    (with_(FAN_IN, flow=FAN_IN["flow"] + [{"from": "agg", "to": "ghost"}]), "unknown role(s) ['ghost']"),
    (with_(FAN_IN, flow=FAN_IN["flow"][:3] + [{"from": "review", "to": "a", "max_rounds": 0}]), "max_rounds must"),
    (with_(FAN_IN, flow=FAN_IN["flow"][:3] + [{"from": "a", "to": "review", "max_rounds": 1}]),
     "does not go back upstream"),
    (with_(FAN_IN, roles=[{"name": "x"}]), "give exactly one of prompt"),
    (with_(FAN_IN, colour="red"), "unknown spec key(s) ['colour']"),
])
def test_bad_spec_is_one_line_error_at_make(spec, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")) as e:
        mappa_envs.make("Team-v0", spec=spec)
    assert "\n" not in str(e.value)


def test_bad_yaml_file_error_names_the_file(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text("roles: [{name: a, prompt: x}, {name: a, prompt: y}]\n")
    with pytest.raises(SpecError, match=f"{path}: duplicate role name"):
        mappa_envs.make("Team-v0", spec=str(path))
    with pytest.raises(SpecError, match="neither a YAML file nor a shipped spec"):
        mappa_envs.make("Team-v0", spec=str(tmp_path / "missing.yaml"))


def test_fan_in_order_and_default_sees():
    team = build_team(FAN_IN)
    assert team.names == ["lead", "a", "b", "agg", "review"]  # fan-out roles act in turn, in the order listed
    by = {r.name: r for r in team.roles}
    assert by["agg"].sees == ("a", "b")  # as given
    assert by["review"].sees == ("lead", "a", "b", "agg")  # default: everyone upstream
    assert by["a"].sees == ("lead",)
    assert "REVISE" in by["review"].duties
    assert "REVISE" not in by["agg"].duties


def play_script(env, script):
    """Step `env` with script(agent, n_turns_so_far) and return the agents in the order they acted."""
    env.reset(seed=0)
    acted, counts = [], {}
    for agent in env.agent_iter():
        _, _, term, trunc, info = env.last()
        if term or trunc:
            env.step(None)
            continue
        acted.append(agent)
        counts[agent] = counts.get(agent, 0) + 1
        env.step(script(agent, counts[agent], info["messages"]))
    return acted


def test_loop_sends_back_at_most_max_rounds_and_shows_feedback():
    env = mappa_envs.make("Team-v0", spec=FAN_IN, sandbox="local")
    seen = {}

    def script(agent, n, messages):
        seen[(agent, n)] = messages[-1]["content"]
        return "Not good enough: REVISE \\boxed{1}" if agent == "review" else "\\boxed{1}"

    try:
        acted = play_script(env, script)
        rounds = env.transcript()["loop_rounds"]
    finally:
        env.close()
    assert acted == ["lead", "a", "b", "agg", "review"] + ["a", "agg", "review"] * 2  # b keeps its work
    assert rounds == {"review->a": 2}
    assert "## Sent back" not in seen[("a", 1)]
    assert "## Sent back\nThe review sent the work back to you (round 1 of at most 2)" in seen[("a", 2)]
    assert "## Your previous turn" in seen[("a", 2)]
    assert "REVISE" in seen[("a", 2)]


def test_no_signal_no_loop():
    env = mappa_envs.make("Team-v0", spec=FAN_IN, sandbox="local")
    try:  # the signal is a whole word: "REVISED" or "revise" do not send work back
        acted = play_script(env, lambda agent, n, m: "I REVISED nothing, no need to revise. \\boxed{1}")
    finally:
        env.close()
    assert acted == ["lead", "a", "b", "agg", "review"]


def test_fan_in_role_sees_only_its_inputs():
    env = mappa_envs.make("Team-v0", spec=FAN_IN, sandbox="local")
    seen = {}
    try:
        play_script(env, lambda agent, n, m: seen.setdefault(agent, m[-1]["content"]) and f"{agent} says \\boxed{{1}}")
    finally:
        env.close()
    assert "## Output of the a" in seen["agg"]
    assert "## Output of the b" in seen["agg"]
    assert "## Output of the lead" not in seen["agg"]


def test_shipped_specs_load():
    assert {"mathchat", "dsbench", "review"} <= set(shipped_specs())
    for name in shipped_specs():
        assert load_team(name).roles


def test_team_v0_with_mathchat_spec_plays_like_mathchat_v0():
    kwargs = {"num_tasks": 6}
    ours = play("Team-v0", {"spec": "mathchat", "scenario_args": kwargs}, {"skill": 0.5, "code_skill": 0.5}, 3)
    theirs = play("MathChat-v0", kwargs, {"skill": 0.5, "code_skill": 0.5}, 3)
    assert ours == theirs


def test_scenario_refuses_team_it_cannot_judge():
    spec = load_team("dsbench")
    with pytest.raises(SpecError, match="judges the roles"):
        mappa_envs.make("Team-v0", spec={"roles": [role("x")], "scenario": spec.scenario})


@pytest.mark.parametrize("spec", shipped_specs() + [FAN_IN, "user:fan_in", "user:loop"])
def test_api_and_seed_test_for_specs(spec, tmp_path):
    """PettingZoo's checkers on every shipped spec (DSBench on one built-in task) and on specs users write."""
    from mappa_envs.dsbench.builtin import builtin_tasks
    from tests.user_specs import write_specs

    if spec in ("user:fan_in", "user:loop"):
        spec = dict(zip(("user:fan_in", "user:loop"), write_specs(tmp_path)))[spec]
    extra = {"scenario_args": {"tasks": builtin_tasks()[:1]}} if spec == "dsbench" else {}
    cycles = (15, 5) if spec == "dsbench" else (30, 10)  # DSBench: each random cell runs in the sandbox
    api_and_seed_test(lambda: mappa_envs.make("Team-v0", spec=spec, sandbox="local", **extra), *cycles)


class Recorder:
    def __init__(self):
        from mappa_envs.coach.rule import RuleCoach

        self.rule, self.requests = RuleCoach(), []

    def score(self, request):
        self.requests.append(request)
        return self.rule.score(request)

    async def ascore(self, request):
        return self.score(request)


def test_coach_prompt_names_the_topology():
    from mappa_envs.coach.prompts import coach_messages, load_template

    coach = Recorder()
    env = mappa_envs.make("Team-v0", spec=FAN_IN, sandbox="local", coach=coach)
    try:
        play_script(env, lambda agent, n, m: "\\boxed{1}")
    finally:
        env.close()
    request = coach.requests[-1]
    prompt = coach_messages(load_template(request.env_id), request)[1]["content"]
    assert "## The team\nAgents act in this order: lead (starts; sees only the task) -> a (after lead" in prompt
    assert "agg (after a, b; sees a, b)" in prompt
    assert "The review may send the work back to the a up to 2 time(s); then a, agg, review act again." in prompt


def test_docs_worked_example_is_a_valid_spec():
    import re
    from pathlib import Path

    import yaml

    doc = (Path(__file__).parents[2] / "docs" / "environments.md").read_text()
    example = doc.split("### A worked example: fan-in and a loop", 1)[1]
    spec = yaml.safe_load(re.search(r"```yaml\n(.*?)```", example, re.DOTALL).group(1))
    env = mappa_envs.make("Team-v0", spec=spec, sandbox="local")
    try:
        assert env.possible_agents == ["lead", "coder", "reasoner", "aggregator", "reviewer"]
        assert env.team.rerun(env.team.loops[0]) == ["coder", "aggregator", "reviewer"]
        assert env.roles["aggregator"].sees == ("coder", "reasoner")
    finally:
        env.close()


def test_docs_user_specs_are_the_tested_ones():
    """docs/environments.md's fan-in and loop specs are tests/user_specs.py's, which the blame, coach-eval
    and training tests run."""
    import re
    from pathlib import Path

    import yaml

    from tests.user_specs import FAN_IN as FAN_IN_YAML
    from tests.user_specs import LOOP

    doc = (Path(__file__).parents[2] / "docs" / "environments.md").read_text()
    section = doc.split("### Your own team: a fan-in spec and a loop spec", 1)[1].split("\n## ", 1)[0]
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", section, re.DOTALL)]
    assert blocks == [yaml.safe_load(FAN_IN_YAML), yaml.safe_load(LOOP)]


def test_mappa_envs_lists_spec_built_envs(capsys):
    from mappa_cli.main import main

    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    assert "MathChat-v0" in out
    assert "[team spec: mathchat]" in out
    assert "Chain-v0" in out
    assert "review    Review-v0: lead -> coder -> reasoner -> aggregator -> reviewer" in out


class ToyScenario:
    """A scenario written for today's PipelineEnv (its own roles, no bind): the shape a new env brings."""

    env_id = "Toy-v0"

    def __init__(self):
        from mappa_envs.core.records import Role, Task

        self.roles = (Role("writer", "Write a word."), Role("editor", "Fix the word."))
        self._tasks = [Task("t0", "Say hello.", answer="hello")]

    def tasks(self):
        return self._tasks

    def prepare(self, episode):
        pass

    def task_prompt(self, task):
        return task.prompt

    def checks(self, episode, role, action, results):
        return {"said_hello": "hello" in action}

    def outcome(self, episode):
        from mappa_envs.core.records import Outcome

        last = episode.outputs.get(episode.actions[-1].role if episode.actions else "", "")
        return Outcome(score=float("hello" in last), correct="hello" in last)

    def coach_evidence(self, episode, role):
        return {}


def test_a_scenario_with_its_own_roles_plugs_into_team_v0():
    plain = mappa_envs.make("Team-v0", spec=None, scenario=ToyScenario(), sandbox="local")
    looped = mappa_envs.make("Team-v0", scenario=ToyScenario(), sandbox="local", spec={
        "name": "ToyReview-v0", "roles": [role("writer"), role("editor"), role("judge")],
        "flow": [{"from": "writer", "to": "editor"}, {"from": "editor", "to": "judge"},
                 {"from": "judge", "to": "writer", "max_rounds": 1}]})
    try:
        assert plain.possible_agents == ["writer", "editor"]
        assert play_script(plain, lambda a, n, m: "hello") == ["writer", "editor"]
        assert plain.outcome.correct is True
        acted = play_script(looped, lambda a, n, m: "REVISE" if (a, n) == ("judge", 1) else "hello")
        assert acted == ["writer", "editor", "judge", "writer", "editor", "judge"]
        assert looped.transcript()["env_id"] == "ToyReview-v0"
        assert all("said_hello" in a.checks for a in looped.episode.actions)
    finally:
        plain.close()
        looped.close()
    with pytest.raises(SpecError, match="spec=None needs a scenario object"):
        mappa_envs.make("Team-v0", spec=None)


@pytest.mark.parametrize("env_id", ["MathChat-v0", "Chain-v0", "Team-v0"])
def test_team_argument_to_a_fixed_team_is_one_line(env_id):
    with pytest.raises(SpecError, match="Team-v0") as e:
        mappa_envs.make(env_id, team="review")
    assert "\n" not in str(e.value)
