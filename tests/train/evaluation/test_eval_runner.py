"""`mappa eval` end to end on MathChat-v0 (local sandbox, rule coach): outputs, resume, seeding, hygiene."""
import json

import pytest

from mappa_cli.main import main
from mappa_envs.sandbox import make_sandbox
from mappa_train.evaluation.evalsets import resolve
from mappa_train.evaluation.hygiene import OverlapWarning
from mappa_train.evaluation.runner import TRANSCRIPTS, EvalSpecError, evaluate_team, run_eval
from mappa_train.evaluation.teams import make_team
from tests.bench_data import BENCH as DATA


class AlternatingTeam:
    """Answers a problem right on its even-numbered visits and wrong on odd ones (no tool calls).

    With one env (batch_size=1) episodes run in (problem, sample) order, so visit i of a problem is
    its sample i; with more, the driver lets whichever env is ready go first, so use `SeededTeam`.
    """

    def __init__(self, tasks):
        self.gold = {t.prompt: t.answer for t in tasks}
        self.visits: dict[str, int] = {}
        self.calls = 0

    def respond(self, conversations, roles):
        self.calls += 1
        out = []
        for conv, role in zip(conversations, roles):
            problem = conv[1]["content"].removeprefix("Problem:\n").split("\n\n## Output of the", 1)[0]
            if role != "verifier":
                out.append(f"I am the {role}; no code needed.")
                continue
            visit = self.visits.get(problem, 0)
            self.visits[problem] = visit + 1
            answer = self.gold[problem] if visit % 2 == 0 else str(int(self.gold[problem]) + 1)
            out.append(f"Checked. \\boxed{{{answer}}}")
        return out


def alternating_team(env):
    return AlternatingTeam(env.unwrapped.scenario.tasks())


class SeededTeam(AlternatingTeam):
    """Right or wrong by the driver's per-action seed (`seeds=`), so its answers cannot depend on
    which episodes happen to be batched together."""

    def respond(self, conversations, roles, seeds):
        self.calls += 1
        out = []
        for conv, role, seed in zip(conversations, roles, seeds):
            gold = self.gold[conv[1]["content"].removeprefix("Problem:\n").split("\n\n## Output of the", 1)[0]]
            out.append(f"Checked. \\boxed{{{gold if seed % 3 else int(gold) + 1}}}" if role == "verifier"
                       else f"I am the {role}; no code needed.")
        return out


class CountingTeam(AlternatingTeam):
    """Reports token counts the way model policies may: `last_usage`, one entry per conversation."""

    def respond(self, conversations, roles):
        texts = super().respond(conversations, roles)
        self.last_usage = [{"prompt_tokens": 100, "completion_tokens": len(t.split())} for t in texts]
        return texts


class Refuse:
    def respond(self, conversations, roles):
        raise AssertionError("a resumed run must not play any episode")


def synthetic(n):
    return resolve(f"synthetic:{n}")


@pytest.fixture(scope="module")
def envkw():
    """A real local sandbox shared by the tests' envs; nothing pre-imported, so sessions start fast."""
    sandbox = make_sandbox("local", pool_size=2, preimport=())
    yield {"sandbox": sandbox}
    sandbox.close()


def test_cli_eval_writes_transcripts_results_plots_and_leaderboard(tmp_path, capsys):
    rc = main(["eval", "--team", "scripted", "--name", "oracle", "--sets", "synthetic:3", "--k", "2",
               "--batch-size", "2", "--out", str(tmp_path), "--preimport", ""])
    assert rc == 0
    run = tmp_path / "oracle"
    lines = (run / TRANSCRIPTS).read_text().splitlines()
    assert len(lines) == 6
    episode = json.loads(lines[0])
    assert [a["role"] for a in episode["actions"]][:2] == ["problem_solver", "code_executor"]
    executor = episode["actions"][1]
    assert executor["tool_results"][0]["ok"]
    assert executor["coach"]["score"] is not None
    assert executor["seen"]
    assert episode["outcome"]["correct"] is True
    assert episode["ground_truth"] == episode["outcome"]["gold"]
    # every episode keeps the extracted answer it was judged on, so anyone can check what was counted
    assert all(json.loads(line)["outcome"]["predicted"] == json.loads(line)["outcome"]["gold"] for line in lines)
    results = json.loads((run / "results.json").read_text())
    s = results["sets"]["synthetic:3"]
    assert s["avg@k"]["mean"] == 1.0
    assert s["maj@k"]["mean"] == 1.0
    assert s["pass@k"]["2"]["mean"] == 1.0
    assert set(s["coach_by_role"]) == {"problem_solver", "code_executor", "verifier"}
    assert s["overlap"]["n_overlap"] == 0
    assert s["cost"]["coach_calls"] > 0
    assert results["k"] == 2
    assert results["team"] == "scripted"
    for png in ("accuracy_by_set.png", "coach_by_role.png"):
        assert (run / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    board = (tmp_path / "leaderboard.md").read_text()
    assert "| synthetic:3 | oracle | scripted (reference: reads the gold answer) | 2 | 1.000 ± 0.000 |" in board
    captured = capsys.readouterr()
    assert board in captured.out
    # stderr is not a terminal here: plain progress lines, the last one when the set is done
    progress = [line for line in captured.err.splitlines() if line.startswith("synthetic:3: ")]
    assert progress[-1].startswith("synthetic:3: 6/6 episodes, ")
    assert "episodes/s, done in" in progress[-1]
    assert "coach:" not in captured.err  # the rule coach never fails


def test_metrics_of_a_mixed_team(tmp_path, envkw):
    records, _ = run_eval(alternating_team, [synthetic(3)], tmp_path, k=2, batch_size=1, env_kwargs=envkw)
    by = records["synthetic:3"]
    assert [(r["task_index"], r["sample"], r["outcome"]["correct"]) for r in by] == [
        (0, 0, True), (0, 1, False), (1, 0, True), (1, 1, False), (2, 0, True), (2, 1, False)]
    results = evaluate_team(alternating_team, [synthetic(3)], tmp_path, "mixed", k=2, env_kwargs=envkw, plots=False)
    s = results["sets"]["synthetic:3"]
    assert s["avg@k"]["mean"] == 0.5
    assert s["pass@k"]["1"]["mean"] == 0.5
    assert s["pass@k"]["2"]["mean"] == 1.0  # one right sample of two
    assert s["maj@k"]["mean"] == 0.5  # a 1-1 tie between the right and a wrong answer


def test_policy_token_counts_are_reported(tmp_path, envkw):
    team = lambda env: CountingTeam(env.unwrapped.scenario.tasks())  # noqa: E731
    results = evaluate_team(team, [synthetic(2)], tmp_path, "tokens",
                            k=1, env_kwargs=envkw, plots=False)
    cost = results["sets"]["synthetic:2"]["cost"]
    assert cost["policy_prompt_tokens"] == 100 * cost["actions"]
    assert cost["policy_completion_tokens"] > 0
    episode = json.loads((tmp_path / TRANSCRIPTS).read_text().splitlines()[0])
    # "I am the problem_solver; no code needed." is 7 words
    assert episode["actions"][0]["usage"] == {"prompt_tokens": 100, "completion_tokens": 7}


def test_resume_skips_finished_episodes(tmp_path, envkw):
    first, _ = run_eval(alternating_team, [synthetic(3)], tmp_path, k=2, batch_size=1, env_kwargs=envkw)
    again, _ = run_eval(Refuse(), [synthetic(3)], tmp_path, k=2, batch_size=3, env_kwargs=envkw)  # nothing left to play
    assert again == first
    path = tmp_path / TRANSCRIPTS
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:4]) + "\n" + lines[4][:50])  # killed while writing episode 5
    team = AlternatingTeam(_tasks(synthetic(3), envkw))
    resumed, _ = run_eval(team, [synthetic(3)], tmp_path, k=2, batch_size=1, env_kwargs=envkw)
    assert team.calls == 2 * 3  # the two missing episodes, three roles each
    assert resumed == first
    assert len(path.read_text().splitlines()) == 6  # the torn line is gone


def _tasks(es, envkw):
    import mappa_envs

    env = mappa_envs.make(es.env_id, **es.env_kwargs, **envkw)
    try:
        return list(env.unwrapped.scenario.tasks())
    finally:
        env.close()


def test_resume_refuses_another_seed(tmp_path):
    run_eval(alternating_team, [synthetic(1)], tmp_path, k=1, seed=0)  # builds (and closes) its own local sandbox
    with pytest.raises(ValueError, match="another seed"):
        run_eval(Refuse(), [synthetic(1)], tmp_path, k=1, seed=1)


def test_episodes_do_not_depend_on_batch_size(tmp_path, envkw):
    def team(env):
        return SeededTeam(env.unwrapped.scenario.tasks())

    one, _ = run_eval(team, [synthetic(3)], tmp_path / "a", k=3, batch_size=1, env_kwargs=envkw)
    many, _ = run_eval(team, [synthetic(3)], tmp_path / "b", k=3, batch_size=4, env_kwargs=envkw)
    assert {r["outcome"]["correct"] for r in one["synthetic:3"]} == {True, False}  # a mix, so order would show
    assert one == many


@pytest.mark.skipif(not (DATA / "amc.json").is_file(), reason=f"bench data not found at {DATA}")
def test_overlap_with_the_training_source_is_warned_and_reported(tmp_path, envkw):
    es = resolve("amc", DATA, train_source=str(DATA / "amc.json"))  # amc_eval_32 is a subset of amc.json
    es.max_problems = 2
    with pytest.warns(OverlapWarning, match="2/2 problems of eval set 'amc'"):
        results = evaluate_team(alternating_team, [es], tmp_path, "leaky", k=1, env_kwargs=envkw, plots=False)
    overlap = results["sets"]["amc"]["overlap"]
    assert overlap["n_overlap"] == 2
    assert overlap["fraction"] == 1.0
    assert overlap["train_source"].endswith("amc.json")


@pytest.mark.skipif(not (DATA / "aime_2025.json").is_file(), reason=f"bench data not found at {DATA}")
def test_named_sets_resolve_to_the_data_files(envkw):
    es = resolve("aime2025", DATA)
    assert es.env_kwargs == {"task_source": str(DATA / "aime_2025.json"), "split": "all"}
    assert es.train_source == str(DATA / "AIME_1983_2024.json")  # the paper's training problems
    assert len(_tasks(es, envkw)) == 30


def test_bad_set_names_say_what_to_do(tmp_path, monkeypatch):
    monkeypatch.delenv("MAPPA_DATA_DIR", raising=False)
    with pytest.raises(EvalSpecError, match="--data-dir"):
        resolve("aime2025")
    with pytest.raises(ValueError, match="unknown eval set 'gsm8k'"):
        resolve("gsm8k")
    with pytest.raises(ValueError, match="synthetic:N"):
        resolve("synthetic:zero")


def test_cli_compare(tmp_path, capsys):
    common = ["--sets", "synthetic:3", "--k", "2", "--out", str(tmp_path), "--no-plots", "--preimport", ""]
    team = "tests.train.evaluation.test_eval_runner:alternating_team"
    assert main(["eval", "--team", team, "--name", "base", *common]) == 0
    assert main(["eval", "--team", "scripted", "--name", "trained", *common]) == 0
    capsys.readouterr()
    assert main(["eval", "--compare", str(tmp_path / "base"), str(tmp_path / "trained"), "--n-boot", "500"]) == 0
    out = capsys.readouterr().out
    assert "| synthetic:3 | avg | 3 | 0.500 | 1.000 | +0.500 | [+0.500, +0.500] (95%) | B better |" in out
    assert "3 of 3 problems changed" in out


def test_dsbench_builtin_task(tmp_path):
    es = resolve("dsbench")
    es.max_problems = 1
    sandbox = make_sandbox("local", pool_size=1)
    try:
        with pytest.warns(OverlapWarning, match="1/1 problems of eval set 'dsbench'"):  # built-in tasks have no holdout
            results = evaluate_team(make_team("scripted"), [es], tmp_path, "ds", k=1,
                               env_kwargs={"sandbox": sandbox})
    finally:
        sandbox.close()
    s = results["sets"]["dsbench"]
    assert s["valid_rate"]["mean"] == 1.0
    assert 0 < s["quality"]["mean"] <= 1
    assert "avg@k" not in s
    assert set(s["coach_by_role"]) == {"data_engineer", "modeler", "analyst"}
    (task,) = s["per_task"]
    assert (tmp_path / "quality_dsbench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "accuracy_by_set.png").exists()  # no rule-checked answers to plot
    episode = json.loads((tmp_path / TRANSCRIPTS).read_text())
    assert episode["outcome"]["submission_valid"]
    assert episode["task_id"] == task


def test_run_identity_guards_played_episodes_only(tmp_path):
    from mappa_train.evaluation.runner import RUN_FILE, claim_run

    assert claim_run(tmp_path, {"team": "a", "seed": 0}) is True  # new: recorded with its first episode
    assert not (tmp_path / RUN_FILE).exists()
    (tmp_path / RUN_FILE).write_text(json.dumps({"team": "a", "seed": 0}))
    assert claim_run(tmp_path, {"team": "b", "seed": 0}) is True  # nothing played under "a": "b" takes over
    (tmp_path / RUN_FILE).write_text(json.dumps({"team": "b", "seed": 0}))
    (tmp_path / TRANSCRIPTS).write_text('{"set": "s", "task_id": "t", "sample": 0, "seed": 1}\n')
    assert claim_run(tmp_path, {"team": "b", "seed": 0}) is False  # the same run: resumes
    with pytest.raises(EvalSpecError, match=r"holds a run with other settings \(seed: 0 then, 1 now\)"):
        claim_run(tmp_path, {"team": "b", "seed": 1})
