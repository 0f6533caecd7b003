"""DSBench-v0: Data Engineer -> Modeler -> Analyst on Kaggle-style modeling tasks.

The team is the shipped spec `mappa_envs/teams/dsbench.yaml`; this module is the scenario, which
knows each role's files by name, so a team spec it runs must have exactly these three roles (their
prompts, limits and order are the spec's).

The three agents share one sandbox workspace per episode; each runs its Python in its own kernel.
`prepare` places train.csv, test.csv and sample_submission.csv there once; the hidden answers stay on
the host. After every action each file the action created or rewrote is attributed to the acting
role (`Episode.file_owners`: the last writer; `Episode.file_history`: every change, in order), so
when something is missing or broken the outcome and the coach can name the file and who wrote it.
When a role's turn ends, the hand-off to the next one is checked (`NEEDS`: the files it cannot work
without; for the Analyst also train/test features that line up): the next role's actions carry the
check `inputs_ready`, False when an upstream role broke the hand-off. The rule coach does not score
it; the trainer leaves such actions out of the loss (with `algo.scope: episode` their rewards still
reach the upstream actions' returns), so no agent is taught by a failure that was not its own.

After the Analyst, submission.csv is validated, joined to the answers by id, scored by the task's own
metric and placed between the best trivial submission (0) and a strong reference (1): `Outcome.score`.
Only a submission that beats its own predictions shuffled across the rows (`scoring`: so never a constant
one) and the best trivial one is paid: `correct`, `beats_baseline` and a quality above 0.

Workspace files are read back with `core.workspace` (no links followed, no blocking, a size cap:
`EpisodeLimits.max_read_bytes`); a file that cannot be read is that file's verdict (an invalid
submission, an inconsistent feature file), never an exception out of `step()`.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from mappa_envs.coach.types import INPUTS_READY
from mappa_envs.core.pipeline import Episode, EpisodeLimits, Outcome, PipelineEnv, Role, Task
from mappa_envs.core.team import Team, load_team, no_team_argument
from mappa_envs.core.tools import extract_code_blocks
from mappa_envs.core.untrusted import one_line
from mappa_envs.core.workspace import WorkspaceFileError, read_file
from mappa_envs.dsbench import prompts
from mappa_envs.dsbench.attribution import TASK_FILES, owed_by, track_files
from mappa_envs.dsbench.csvread import read_csv_bounded
from mappa_envs.dsbench.metrics import better, get_metric
from mappa_envs.dsbench.modelcheck import model_problem
from mappa_envs.dsbench.scoring import SubmissionReport, read_answers, relative_quality, score_submission
from mappa_envs.dsbench.tasks import DSTask
from mappa_envs.errors import EnvArgumentError, SpecError, TaskDataError
from mappa_envs.sandbox.types import ExecResult

log = logging.getLogger(__name__)

ENGINEER, MODELER, ANALYST = "data_engineer", "modeler", "analyst"
EXPECTED_FILES = {ENGINEER: prompts.ENGINEER_FILES, MODELER: prompts.MODELER_FILES, ANALYST: prompts.ANALYST_FILES}
# what each role cannot work without, from the roles before it (the Modeler needs no test features)
NEEDS = {MODELER: ("X_train.csv", "y_train.csv"), ANALYST: ("X_test.csv", "model.pkl")}
# the checks that say a role's part is finished (with its files present and written by it)
DONE_WHEN = {ENGINEER: ("features_consistent",), MODELER: ("model_works",), ANALYST: ("submission_valid",)}


@dataclass
class DSBenchScenario:
    task_list: Sequence[DSTask]
    max_actions: int = 4
    cache_dir: Path | None = None  # where lazily computed baseline/reference scores are kept
    max_read_bytes: int = EpisodeLimits.max_read_bytes  # the largest workspace file read back
    env_id: str = "DSBench-v0"

    def __post_init__(self):
        if not self.task_list:
            raise TaskDataError("DSBench-v0 needs at least one task")
        self._answers: dict[str, pd.DataFrame] = {}  # host-side only: never written to the workspace
        self._samples: dict[str, bytes] = {}
        self.roles = (
            Role(ENGINEER, prompts.DATA_ENGINEER, tools=True, max_actions=self.max_actions, kernel=ENGINEER),
            Role(MODELER, prompts.MODELER, tools=True, max_actions=self.max_actions, sees=(ENGINEER,), kernel=MODELER),
            Role(ANALYST, prompts.ANALYST, tools=True, max_actions=self.max_actions, sees=(ENGINEER, MODELER),
                 kernel=ANALYST),
        )
        self._ds = {t.id: t for t in self.task_list}
        self._tasks = [Task(t.id, t.description, answer=None, meta={"metric": t.metric, "source": t.source})
                       for t in self.task_list]

    # --- Scenario protocol -----------------------------------------------------------------------

    def bind(self, team: Team) -> None:
        if sorted(team.names) != sorted(EXPECTED_FILES):
            raise SpecError(f"{team.name}: the DSBench scenario judges the roles {sorted(EXPECTED_FILES)} by "
                            f"their files; the spec has {team.names}")
        self.roles = team.roles

    def tasks(self) -> Sequence[Task]:
        return self._tasks

    def prepare(self, episode: Episode) -> None:
        ds = self._ds[episode.task.id]
        s = episode.session
        s.write_file("train.csv", ds.train_csv.read_bytes())
        s.write_file("test.csv", ds.test_csv.read_bytes())
        s.write_file("sample_submission.csv", self._sample_submission(ds))
        episode.state["inventory"] = {}
        track_files(episode, "task")

    def task_prompt(self, task: Task) -> str:
        return (f"{task.prompt}\n\nThe working directory holds train.csv, test.csv and sample_submission.csv. "
                "The submission is scored on the hidden test answers.")

    def checks(self, episode: Episode, role: Role, action: str, results: list[ExecResult]) -> dict[str, bool]:
        damage = track_files(episode, role.name)
        if role.name == MODELER and "model.pkl" in episode.file_owners:
            self._model_problem(episode)  # loading it runs its code: whatever that changes is the Modeler's doing
            damage += track_files(episode, role.name)
        episode.state["damage"] = damage
        has_code = bool(extract_code_blocks(action))
        earlier = 0
        for a in reversed(episode.actions):
            if a.role != role.name:
                break
            earlier += 1
        turn_over = not has_code or earlier + 1 >= role.max_actions
        present = all(f in episode.file_owners for f in EXPECTED_FILES[role.name])
        checks: dict[str, bool] = {}
        if damage:  # changed or deleted a file the task or another role owns: reported only when it happens
            checks["others_files_intact"] = False
        if earlier and episode.state.get("done", {}).get(role.name):  # its part was finished before this action:
            checks["closing_report"] = not has_code  # the summary that ends the turn beats more code (padding)
        if role.name in NEEDS:
            checks[INPUTS_READY] = self._handoff(episode, role.name) is None
        if has_code or not present:  # a closing summary after the work is done is not penalized
            checks["code_present"] = has_code
        if present or turn_over:  # exploring before writing files is fine; ending the turn without them is not
            checks["expected_files_present"] = present
        if role.name == ENGINEER and present:
            checks["features_consistent"] = self._features_consistent(episode) is None
        if role.name == MODELER and present:
            checks["model_works"] = self._model_problem(episode) is None
        if role.name == ANALYST and ("submission.csv" in episode.file_owners or turn_over):
            report = self._submission(episode)
            checks["submission_valid"] = report is not None and report.valid
            if report is not None and report.valid:
                checks["beats_baseline"] = _pays(report, self._scores(episode)[0])
        names = [r.name for r in self.roles]
        if turn_over and role.name != names[-1]:  # judged as the next role finds it, before it can touch it
            following = names[names.index(role.name) + 1]
            episode.state.setdefault("handoff", {})[following] = self._handoff_problem(episode, following)
        episode.state.setdefault("done", {})[role.name] = present and all(
            episode.file_owners.get(f) == role.name for f in EXPECTED_FILES[role.name]) and all(
            checks.get(c, False) for c in DONE_WHEN[role.name])
        return checks

    def outcome(self, episode: Episode) -> Outcome:
        ds = self._ds[episode.task.id]
        baseline, reference = self._scores(episode)
        report = self._submission(episode)
        missing = self._missing_files(episode, ANALYST)
        details = {
            "task_id": ds.id, "metric": ds.metric, "higher_is_better": get_metric(ds.metric).higher_is_better,
            "metric_value": None, "baseline_score": baseline, "reference_score": reference, "quality": 0.0,
            "submission_valid": bool(report and report.valid), "missing_files": missing, "failure": None,
            "files": dict(episode.file_owners), "file_history": {f: list(h) for f, h in episode.file_history.items()},
        }
        if report is not None and report.valid:
            paid = _pays(report, baseline)  # a constant or any submission no better than its own shuffles: 0
            quality = relative_quality(ds.metric, report.score, baseline, reference) if paid else 0.0
            details.update(metric_value=report.score, quality=quality, warnings=report.warnings,
                           constant=report.constant, informative=report.informative)
            return Outcome(score=quality, correct=paid, details=details)
        error = report.error if report is not None else "submission.csv was not written"
        owner = episode.file_owners.get("submission.csv", ANALYST)
        details["failure"] = {"file": "submission.csv", "error": error, "owner": owner,
                              "root_cause": self._root_cause(episode, missing, error, owner)}
        return Outcome(score=0.0, correct=False, details=details)

    def _handoff(self, episode: Episode, role: str) -> str | None:
        """What was wrong with `role`'s inputs when its turn began (None: nothing, or not judged yet)."""
        return episode.state.get("handoff", {}).get(role)

    def _handoff_problem(self, episode: Episode, role: str) -> str | None:
        missing = [f for f in NEEDS.get(role, ()) if f not in episode.file_owners]
        if missing:
            return f"missing {', '.join(missing)}"
        if role == ANALYST and (problem := self._features_consistent(episode)) is not None:
            return f"{problem[0]}: {problem[1]}"
        if role == ANALYST and (problem := self._model_problem(episode)) is not None:
            return problem
        return None

    def _root_cause(self, episode: Episode, missing: dict[str, str], error: str, owner: str) -> dict:
        """The earliest broken link: a task file an agent rewrote, then role by role a missing file (owed by
        whoever deleted it) or, for the Data Engineer's files, an inconsistency (owed by their last writer),
        then the submission itself."""
        for file in TASK_FILES:  # a task file an agent rewrote: the last writer answers for it
            writer = episode.file_owners.get(file)
            if writer not in (None, "task"):
                return {"file": file, "owner": writer, "reason": f"{file} was modified by the {writer}"}
        for role in (ENGINEER, MODELER, ANALYST):
            for file in EXPECTED_FILES[role]:
                if file in missing:
                    return {"file": file, "owner": missing[file], "reason": "missing"}
            if role == ENGINEER and (problem := self._features_consistent(episode)) is not None:
                return {"file": problem[0], "owner": episode.file_owners.get(problem[0], ENGINEER),
                        "reason": problem[1]}
        return {"file": "submission.csv", "owner": owner, "reason": error}

    def coach_evidence(self, episode: Episode, role: Role) -> dict:
        ds = self._ds[episode.task.id]
        baseline, reference = self._scores(episode)
        metrics: dict = {
            "metric": ds.metric, "higher_is_better": get_metric(ds.metric).higher_is_better,
            "baseline_score": baseline, "reference_score": reference,
            "expected_files": {f: {"owner": r, "present": f in episode.file_owners,
                                   "written_by": episode.file_owners.get(f)}
                               for r in self._upto(role.name) for f in EXPECTED_FILES[r]},
            "missing_files": self._missing_files(episode, role.name),
            "changed_task_files": {f: h for f, h in episode.file_history.items() if f in TASK_FILES and len(h) > 1},
        }
        if episode.state.get("damage"):
            metrics["others_files_damaged"] = episode.state["damage"]
        if role.name in NEEDS:
            metrics["inputs_problem"] = self._handoff(episode, role.name)
        if episode.state.get("inventory_error"):
            metrics["inventory_error"] = episode.state["inventory_error"]
        if role.name == ENGINEER and all(f in episode.file_owners for f in prompts.ENGINEER_FILES):
            problem = self._features_consistent(episode)
            metrics["features_problem"] = None if problem is None else {"file": problem[0], "problem": problem[1]}
        if role.name in (MODELER, ANALYST) and "model.pkl" in episode.file_owners:
            metrics["model_problem"] = self._model_problem(episode)
        if role.name == ANALYST:
            report = self._submission(episode)
            metrics["submission"] = report.to_dict() if report else None
        if episode.outcome is not None:
            metrics["outcome"] = {"score": episode.outcome.score, **episode.outcome.details}
        return {"metrics": metrics}

    # --- internals -------------------------------------------------------------------------------

    def _upto(self, role: str) -> list[str]:
        names = [r.name for r in self.roles]
        return names[: names.index(role) + 1]

    def _missing_files(self, episode: Episode, role: str) -> dict[str, str]:
        """Expected files of `role` and the roles before it that are not in the workspace -> who owes them."""
        return {f: owed_by(episode, f, r) for r in self._upto(role) for f in EXPECTED_FILES[r]
                if f not in episode.file_owners}

    def _submission(self, episode: Episode) -> SubmissionReport | None:
        """The verdict on the current submission.csv (cached by content), or None if there is none."""
        if "submission.csv" not in episode.file_owners:
            return None
        ds = self._ds[episode.task.id]
        try:
            data = read_file(episode.session, "submission.csv", self.max_read_bytes)
        except WorkspaceFileError as e:
            return SubmissionReport(valid=False, metric=ds.metric, error=str(e))
        key = hashlib.sha256(data).hexdigest()
        cached = episode.state.get("submission")
        if cached is None or cached[0] != key:
            try:
                report = score_submission(ds, data, self._answers_for(ds))
            except Exception as e:  # a scorer bug or a submission no check foresaw: that submission's verdict
                log.error("DSBench: scoring submission.csv of task %s failed", ds.id, exc_info=True)
                report = SubmissionReport(valid=False, metric=ds.metric,
                                          error=f"the scorer failed on this submission: {type(e).__name__}: "
                                                f"{one_line(e)[:300]}")
            cached = (key, report)
            episode.state["submission"] = cached
        return cached[1]

    def _answers_for(self, ds: DSTask) -> pd.DataFrame:
        if ds.id not in self._answers:
            self._answers = {ds.id: read_answers(ds)}  # one task's answers in memory at a time
        return self._answers[ds.id]

    def _features_consistent(self, episode: Episode) -> tuple[str, str] | None:
        """None when the engineer's files line up with the task's; else (file, what is wrong with it).
        Cached by the files' fingerprints: the check, the hand-off and the coach's evidence parse them once."""
        if "inventory_error" in episode.state:  # fingerprints are stale: read the files again
            return self._check_features(episode)
        key = tuple(episode.state["inventory"].get(f) for f in prompts.ENGINEER_FILES)
        cached = episode.state.get("features")
        if cached is None or cached[0] != key:
            cached = episode.state["features"] = (key, self._check_features(episode))
        return cached[1]

    def _model_problem(self, episode: Episode) -> str | None:
        """None when model.pkl loads and predicts (in the sandbox: `modelcheck`); cached by fingerprints."""
        key = tuple(episode.state["inventory"].get(f) for f in ("model.pkl", "X_test.csv", "X_train.csv"))
        cached = episode.state.get("model_check")
        if cached is None or cached[0] != key or "inventory_error" in episode.state:
            problem = model_problem(episode.session, self._ds[episode.task.id].id_column)
            cached = episode.state["model_check"] = (key, problem)
        return cached[1]

    def _check_features(self, episode: Episode) -> tuple[str, str] | None:
        ds = self._ds[episode.task.id]
        tables = {}
        for f in prompts.ENGINEER_FILES:
            if f not in episode.file_owners:
                return f, "missing"
            try:
                tables[f] = read_csv_bounded(read_file(episode.session, f, self.max_read_bytes), f)
            except WorkspaceFileError as e:
                return f, f"unreadable: {e}"
            except Exception as e:  # any unparsable file is the engineer's problem to hear about, not ours to raise
                return f, f"unreadable: {type(e).__name__}: {one_line(e)[:300]}"
        x_train, y_train, x_test = (tables[f] for f in prompts.ENGINEER_FILES)
        n_test = len(self._answers_for(ds))
        if len(x_test) != n_test:
            return "X_test.csv", f"X_test.csv has {len(x_test)} rows, test.csv has {n_test}"
        if len(x_train) != len(y_train):
            return "y_train.csv", f"X_train.csv has {len(x_train)} rows, y_train.csv has {len(y_train)}"
        if list(x_train.columns) != list(x_test.columns):
            return "X_test.csv", "X_train.csv and X_test.csv have different columns"
        absent = [t for t in ds.target_columns if t not in y_train.columns]
        if absent:
            return "y_train.csv", f"y_train.csv lacks the target column(s) {absent}"
        return None

    def _sample_submission(self, ds: DSTask) -> bytes:
        if ds.sample_submission_csv is not None:
            return ds.sample_submission_csv.read_bytes()
        if ds.id not in self._samples:  # DSBench folders without one: the baseline's, as Kaggle ships
            from mappa_envs.dsbench.reference import baseline_submission

            train, test = (pd.read_csv(p, dtype={ds.id_column: str}) for p in (ds.train_csv, ds.test_csv))
            self._samples[ds.id] = baseline_submission(ds, train, test).to_csv(index=False).encode()
        return self._samples[ds.id]

    def _scores(self, episode: Episode) -> tuple[float, float | None]:
        ds = self._ds[episode.task.id]
        if ds.baseline_score is None:
            ds = self._ds[ds.id] = _scored(ds, self.cache_dir)
        return ds.baseline_score, ds.reference_score


def _pays(report: SubmissionReport, baseline: float) -> bool:
    """A valid submission earns credit when it carries information about the rows and beats the best trivial one."""
    return report.valid and report.informative and better(report.metric, report.score, baseline)


def _scored(ds: DSTask, cache_dir: Path | None) -> DSTask:
    """Compute (or read back) a task's baseline and reference scores."""
    from mappa_envs.dsbench.builtin import default_cache_dir
    from mappa_envs.dsbench.reference import BASELINE_VERSION, reference_scores

    stamp = f"{BASELINE_VERSION}-{ds.answers_csv.stat().st_size}-{ds.answers_csv.stat().st_mtime_ns}"
    path = Path(cache_dir or default_cache_dir()) / "dsbench-scores" / f"{ds.id}.json"
    if path.is_file():
        saved = json.loads(path.read_text())
        if saved.get("stamp") == stamp:
            return ds.with_scores(saved["baseline"], saved["reference"])
    baseline, reference, why = reference_scores(ds)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"stamp": stamp, "baseline": baseline, "reference": reference, "reference_error": why}))
    return ds.with_scores(baseline, reference)


def load_task_source(tasks: Any, split: str, cache_dir: str | Path | None, seed: int | None = None,
                     metadata: str | Path | None = None, prompts: str | Path | None = None) -> list[DSTask]:
    """"builtin", a DSBench folder (with its `metadata`/`prompts` files when given), or a list of `DSTask`;
    anything else is an `EnvArgumentError`."""
    is_folder = isinstance(tasks, (str, os.PathLike)) and os.fspath(tasks) != "builtin"
    if (metadata is not None or prompts is not None) and not is_folder:
        raise EnvArgumentError("metadata= and prompts= describe the tasks of a DSBench data folder; pass the folder "
                               "as tasks= (e.g. tasks='~/DSBench/data_modeling/data')")
    if isinstance(tasks, (str, os.PathLike)):
        if not is_folder:
            from mappa_envs.dsbench.builtin import builtin_tasks

            return builtin_tasks(cache_dir, seed=seed)
        from mappa_envs.dsbench.tasks import load_dsbench

        return load_dsbench(tasks, split=split, metadata=metadata, prompts=prompts)
    if isinstance(tasks, (list, tuple)) and tasks and all(isinstance(t, DSTask) for t in tasks):
        return list(tasks)
    if isinstance(tasks, (list, tuple)) and not tasks:
        raise TaskDataError("tasks is an empty list: give at least one DSTask")
    got = type(tasks).__name__ if not isinstance(tasks, (list, tuple)) else \
        "a list of " + ", ".join(sorted({type(t).__name__ for t in tasks}))
    raise EnvArgumentError(f"tasks must be 'builtin', a DSBench data folder or a list of DSTask; got {got}")


def make_scenario(tasks: str | Path | Sequence[DSTask] = "builtin", split: str = "eval",
                  cache_dir: str | Path | None = None, task_seed: int | None = None,
                  max_read_bytes: int = EpisodeLimits.max_read_bytes, metadata: str | Path | None = None,
                  prompts: str | Path | None = None) -> DSBenchScenario:
    """The DSBench scenario (the arguments are `DSBenchEnv`'s), for team specs."""
    if split not in ("train", "eval", "all"):
        raise EnvArgumentError(f"split={split!r} is not one of 'train', 'eval', 'all'")
    task_list = load_task_source(tasks, split, cache_dir, task_seed, metadata, prompts)
    return DSBenchScenario(task_list, cache_dir=Path(cache_dir).expanduser() if cache_dir else None,
                           max_read_bytes=max_read_bytes)


class DSBenchEnv(PipelineEnv):
    """DSBench-v0: the shipped spec "dsbench" on the DSBench scenario. See the module docstring.

    Args:
        tasks: "builtin" (offline tasks, the default), a DSBench data folder, or a list of `DSTask`.
        split: for a DSBench folder: "train" (64 tasks), "eval" (8) or "all".
        metadata: for a DSBench folder: the split file listing its tasks (JSON lines of {prompt,
            metadata: {task_id}}) instead of the reference's split files; `split` is then not used.
        prompts: for a DSBench folder: the task-descriptions file (task id -> cleaned_prompt, metric,
            id_column, target_column). Both are looked for in the folder and its parent when not given.
        cache_dir: where built-in tasks and computed baseline/reference scores live.
        task_seed: for "builtin": the generator's seed (None: a secret one, drawn once per cache folder).
        max_actions: most actions each agent may take in its turn.
        limits: truncation limits and caps (default: 60 s per cell, room for every agent's full turn).
        Everything else goes to `PipelineEnv` (coach, sandbox, reward_mode, render_mode, ...).
    """

    def __init__(self, tasks: str | Path | Sequence[DSTask] = "builtin", split: str = "eval",
                 cache_dir: str | Path | None = None, task_seed: int | None = None, max_actions: int = 4,
                 limits: EpisodeLimits | dict | None = None, metadata: str | Path | None = None,
                 prompts: str | Path | None = None, **kwargs: Any):
        if isinstance(max_actions, bool) or not isinstance(max_actions, int) or max_actions < 1:
            raise EnvArgumentError(f"max_actions must be an integer >= 1, got {max_actions!r}")
        limits = EpisodeLimits.coerce(limits if limits is not None else
                                      {"cell_timeout_s": 60.0, "max_total_actions": 3 * max_actions + 1})
        no_team_argument("DSBench-v0", "mappa_envs.dsbench.env:make_scenario", kwargs)
        scenario = make_scenario(tasks, split, cache_dir, task_seed, limits.max_read_bytes, metadata, prompts)
        team = load_team("dsbench")
        team = team.with_max_actions({n: max_actions for n in team.names})
        super().__init__(scenario, team=team, limits=limits, **kwargs)
