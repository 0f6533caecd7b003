"""What a newcomer hit (issue 40): each a working path or one clear line, with nothing lost.

The policies below are `--policy`/`--team` factories (`tests.cli.test_cli_newcomer:NAME`) that break the
TextPolicy contract the ways a first attempt does."""
from __future__ import annotations

import json
import logging

import pytest

from mappa_cli.main import main

FAST = ["--no-plots", "--preimport", "", "--no-progress"]
HERE = "tests.cli.test_cli_newcomer"


class _Answers:
    def __init__(self, answer):
        self.answer = answer

    def respond(self, conversations, roles):
        return self.answer(len(conversations))


def raises_in_factory(env):
    raise RuntimeError("the model folder is missing")


def raises_in_respond(env):
    return _Answers(lambda n: {}["no such key"])


def one_text_too_many(env):
    return _Answers(lambda n: ["The answer is \\boxed{1}."] * (n + 1))


def no_list(env):
    return _Answers(lambda n: "The answer is \\boxed{1}.")


def answers_none(env):
    return _Answers(lambda n: [None] * n)


def not_a_policy(env):
    return None


def one_line(capsys, status: int, argv: list[str]) -> str:
    rc = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("== ")]  # eval's per-team header
    assert rc == status, err
    assert "Traceback" not in err
    assert len(lines) == 1, err
    return lines[0]


BROKEN = {
    "raises_in_factory": "building the policy raised RuntimeError: the model folder is missing",
    "raises_in_respond": "respond() raised KeyError: 'no such key'",
    "one_text_too_many": "respond() returned 2 texts for 1 conversation(s); it must return a list with one text",
    "no_list": "respond() returned a str for 1 conversation(s)",
    "not_a_policy": "got None, not a policy with respond(conversations, roles) -> list[str]",
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_run_policy_is_one_line_and_leaves_no_file(tmp_path, capsys, name):
    out = tmp_path / "t.jsonl"
    line = one_line(capsys, 1, ["run", "MathChat-v0", "--episodes", "1", "--policy", f"{HERE}:{name}",
                                "--out", str(out), "--no-progress", "--preimport", ""])
    assert line == f"mappa run: --policy {HERE}:{name}: {BROKEN[name]}" or line.startswith(
        f"mappa run: --policy {HERE}:{name}: {BROKEN[name]}"), line
    assert not out.exists()


def test_a_failed_overwrite_keeps_the_old_transcripts(tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    out.write_text('{"episode": 0}\n')
    one_line(capsys, 1, ["run", "MathChat-v0", "--episodes", "1", "--policy", f"{HERE}:raises_in_respond",
                         "--out", str(out), "--overwrite", "--no-progress", "--preimport", ""])
    assert out.read_text() == '{"episode": 0}\n'


@pytest.mark.parametrize("name", ["raises_in_factory", "one_text_too_many"])
def test_a_broken_eval_team_is_one_line_and_leaves_nothing(tmp_path, capsys, name):
    line = one_line(capsys, 1, ["eval", "--team", f"{HERE}:{name}", "--name", "x", "--sets", "synthetic:1",
                                "--out", str(tmp_path / "out"), *FAST])
    assert line.startswith(f"mappa eval: --team {HERE}:{name}: {BROKEN[name]}"), line
    assert not (tmp_path / "out" / "x").exists()  # no run.json, no empty transcripts.jsonl


def test_a_policy_answering_none_is_played_with_one_warning(tmp_path, capsys, caplog):
    out = tmp_path / "t.jsonl"
    with caplog.at_level(logging.WARNING):
        assert main(["run", "MathChat-v0", "--episodes", "2", "--policy", f"{HERE}:answers_none", "--out", str(out),
                     "--batch-size", "1", "--no-progress", "--preimport", ""]) == 0
    warned = [r.getMessage() for r in caplog.records if "where a text belongs" in r.getMessage()]
    assert warned == [f"--policy {HERE}:answers_none: respond() returned None where a text belongs; the env plays it "
                      "as an empty action (its transcript says so). Return a str for every conversation"]
    action = json.loads(out.read_text().splitlines()[0])["actions"][0]
    assert "got NoneType" in action["input_error"]


def test_run_and_eval_transcripts_hold_each_agents_chat_and_export_it(tmp_path, capsys):
    datasets = pytest.importorskip("datasets")
    run_out = tmp_path / "run.jsonl"
    assert main(["run", "MathChat-v0", "--episodes", "1", "--out", str(run_out), "--no-progress",
                 "--preimport", ""]) == 0
    assert main(["eval", "--team", "scripted:0.5", "--name", "e", "--sets", "synthetic:1",
                 "--out", str(tmp_path / "ev"), *FAST]) == 0
    for path in (run_out, tmp_path / "ev" / "e" / "transcripts.jsonl"):
        record = json.loads(path.read_text().splitlines()[0])
        first, last = record["actions"][0], record["actions"][-1]
        assert first["messages"][-1]["content"] == first["seen"] != ""
        assert last["messages"][-1]["content"] == last["seen"] != first["seen"]  # each agent its own chat
        folder = tmp_path / f"ds-{path.stem}-{path.parent.name}"
        assert main(["export", "transcripts", str(path), "--out", str(folder)]) == 0
        rows = datasets.load_from_disk(str(folder))
        assert all(rows["messages"])  # no row with an empty chat
        assert rows[0]["messages"] == [{"role": m["role"], "content": m["content"]} for m in first["messages"]]


def run_folder(tmp_path, config: str | None, manifest: str | None = None):
    run = tmp_path / "run"
    (run / "final" / "shared").mkdir(parents=True)
    if config is not None:
        (run / "config.json").write_text(config)
    if manifest is not None:
        (run / "final" / "lora.json").write_text(manifest)
    return run


@pytest.mark.parametrize("config, manifest, problem", [
    ("{bad", None, "config.json is not valid JSON (Expecting property name"),
    ("[1]", None, "config.json holds a JSON list, not an object"),
    ("{}", None, "config.json is not a `mappa train` config (no env.id"),
    ('{"env": {"id": "MathChat-v0", "kwargs": [1]}}', None, "config.json is not a `mappa train` config"),
    ('{"env": {"id": "MathChat-v0"}}', "{}", "final/lora.json is not a LoRA run's manifest"),
    ('{"env": {"id": "MathChat-v0"}}', "\xff", "final/lora.json is not valid JSON"),
])
def test_a_damaged_run_folder_is_one_line_naming_its_file(tmp_path, capsys, config, manifest, problem):
    run = run_folder(tmp_path, config, manifest)
    line = one_line(capsys, 2, ["eval", "--team", f"run:{run}", "--sets", "synthetic:1",
                                "--out", str(tmp_path / "out"), *FAST])
    assert line.startswith(f"mappa eval: team spec 'run:{run}': {run}/{problem}"), line


def test_coach_eval_num_tasks_counts_chain_tasks_too(tmp_path, capsys):
    """Each fault is played on the first --num-tasks tasks (it was read for MathChat-v0 only: 20 here;
    CodeTest-v0 takes it the same way)."""
    from mappa_envs.coach_eval.blame import faults_of
    from mappa_envs.coach_eval.card import PROBES

    assert main(["coach-eval", "--env", "Chain-v0", "--num-tasks", "1", "--probe-tasks", "1", "--no-backprop",
                 "--out", str(tmp_path)]) == 0
    episodes = json.loads((tmp_path / "results.json").read_text())["episodes"]
    assert episodes == len(faults_of("Chain-v0")) + len(PROBES) * 4  # 4 roles: Chain-v0's default depth


def test_progress_eta_moves_before_any_episode_ends():
    """Episodes played side by side end together: the ETA counts answered actions, so it shows (and moves)
    from the first answered call, estimated from the roles until an episode ends, then from the episodes."""
    import io
    import re

    from mappa_cli.progress import Progress

    answered = [0]
    stream = io.StringIO()
    p = Progress(4, "synthetic:4", bar=False, every_s=0, stream=stream, actions=lambda: answered[0],
                 actions_per_episode=3)
    assert p.line().endswith("ETA ?")  # nothing answered yet
    answered[0] = 4  # the first batched call: one action of each of the 4 episodes
    assert re.search(r"0/4 episodes, 0\.00 episodes/s, ETA ~\d+ s, 4 of ~12 actions$", p.line()), p.line()
    answered[0] = 10
    p.episode({"actions": [{}] * 5})  # episodes take 5 actions, not 3: the estimate follows
    assert re.search(r"1/4 episodes, .*ETA ~\d+ s, 10 of ~20 actions$", p.line()), p.line()
    answered[0] = 40  # more answered than estimated: still an action left per open episode
    assert re.search(r"ETA ~\d+ s, 40 of ~43 actions$", p.line()), p.line()
    p.close()
