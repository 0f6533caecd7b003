"""RuleCoach: an offline, deterministic coach that scores actions from verifiable signals only.

What it rewards (start at 5, clip to [0, 10]):

| signal                                  | effect |
|-----------------------------------------|--------|
| empty action                            | score 0 |
| every tool call ran without error       | +1.5, and +0.5 more if it printed something |
| a tool call raised                      | -2 |
| a tool call timed out                   | -3 |
| each check in `CoachRequest.checks`     | + its bonus when True, - its penalty when False (`CHECK_WEIGHTS`) |

| check (computed by the env)   | True | False | meaning |
|-------------------------------|------|-------|---------|
| answer_present                | +0.5 | -2.0  | the action states an answer in the required format (\\boxed{}) |
| answer_correct                | +3.5 | -3.5  | that answer matches the ground truth (rule-based, not an LLM) |
| code_present                  | +0.5 | -1.0  | a tool-using role wrote a code block |
| printed_answer_correct        | +2.0 |  0    | MathChat: the code computed the right answer (not a copy) |
| new_work                      |  0   | -5.0  | MathChat, Chain: False on a cell after the answer was computed |
| answer_computed               | +1.5 |  0    | MathChat: the executor's report states what its own code computed |
| expected_files_present        | +1.0 | -2.0  | DSBench: the files this role must leave for the next one exist |
| features_consistent           | +1.0 | -2.0  | DSBench: the Data Engineer's train and test features match |
| submission_valid              | +2.0 | -3.0  | DSBench: the submission has the right ids, columns and rows |
| beats_baseline                | +2.0 | -3.0  | DSBench: it beats the best trivial submission and its own shuffles |
| model_works                   | +1.0 | -3.0  | DSBench: model.pkl loads and predicts (checked in the sandbox) |
| closing_report                | +1.0 | -3.0  | DSBench: part done, it closed the turn with a summary, not more code |
| others_files_intact           |  0   | -3.0  | DSBench (only False): it changed/deleted another role's or task file |
| step_correct                  | +3.5 | -3.5  | Chain: the agent applied its own step to the value it was handed |
| step_computed                 | +1.0 | -4.0  | Chain: its cells printed the step's value, not a copy in the code |
| inputs_ready                  |  0   |  0    | DSBench, Chain: the upstream hand-off was whole (masked when False) |
| code_compiles                 | +0.5 | -2.0  | CodeTest: the submitted function compiles |
| examples_pass                 | +1.5 | -2.5  | CodeTest: it gives the docstring's own examples' values |
| code_correct                  | +2.0 | -6.0  | CodeTest: the submitted function passes the hidden tests |
| review_right                  | +3.0 | -6.0  | CodeTest: the Reviewer left right code (approved or fixed it) |
| tests_correct                 | +1.5 | -3.0  | CodeTest: the Test Writer's tests hold for the reference solution |
| tests_catch_bug               | +1.0 | -4.0  | CodeTest: they fail on a one-token mutant of it |
| tests_catch_all_bugs          | +1.0 | -1.5  | CodeTest: they fail on every such mutant |
| tests_found_bug               | +3.0 | -3.0  | CodeTest: on wrong team code they failed (True) or passed (a miss) |
| handoff_intact                |  0   | -5.0  | CodeTest (only False): the action changed the handed-off solution.py |
| any other check               | +0.5 | -0.5  | |

With these weights the honest MathChat executor is strictly best at every step: a cell that computes
the answer (9.5) beats one that prints a copied number (7.5); then the report of the computed answer
(10) beats another cell (2.5) and a report of a number no code computed (9.0). A turn closed without
an answer is also not a correct one: 0, below a wrong answer (2.0), so silence never pays more. These
comparisons are per action (the trainer's default return scope, "action"); summed over a turn (scope
"agent"), any extra action with a positive score adds, which no 0-10 weighting undoes.

It never reads the prose: two actions with the same signals get the same score. That makes it a
reproducible offline default and a floor to compare LLM coaches against, not a substitute for them.
"""
from __future__ import annotations

from mappa_envs.coach.types import CHECKS_RAN, INPUTS_READY, CoachRequest, CoachScore

# check name -> (reward when True, penalty when False)
CHECK_WEIGHTS: dict[str, tuple[float, float]] = {
    "answer_present": (0.5, 2.0),
    "answer_correct": (3.5, 3.5),
    "code_present": (0.5, 1.0),
    "printed_answer_correct": (2.0, 0.0),  # no penalty: a cell may rightly compute an intermediate step
    "new_work": (0.0, 5.0),  # a cell after the answer is computed pads the turn: below the report
    "answer_computed": (1.5, 0.0),  # the report that ends the turn beats any further cell
    "expected_files_present": (1.0, 2.0),
    "features_consistent": (1.0, 2.0),
    "submission_valid": (2.0, 3.0),
    "beats_baseline": (2.0, 3.0),  # -3: a valid but uninformative submission is not nearly as good as a model
    "step_correct": (3.5, 3.5),
    # Chain: the honest path is strictly best per action. A correct value (9.0; 10 with a cell computing it)
    # beats a computing cell (8.0), which beats filler, a copied number or an echo of the handed value (3.0),
    # padding after the computation (2.0), a wrong value (2.0), no value (0) and a filler cell beside a
    # correct value (7.0).
    "step_computed": (1.0, 4.0),
    # DSBench: the honest path is strictly best. A role whose part is done earns more for the summary that ends
    # its turn (engineer 8.0, analyst 10) than for padding code (6.5, 9.5); a model.pkl must load and predict
    # (a 1-byte one: 5.5, not 9.5); breaking another role's file costs the writer, not its owner.
    "model_works": (1.0, 3.0),
    "closing_report": (1.0, 3.0),
    "others_files_intact": (0.0, 3.0),
    INPUTS_READY: (0.0, 0.0),  # not a judgement of the action: False makes the trainer leave it out
    CHECKS_RAN: (0.0, 10.0),  # the env could not check the action (it pays 0 without asking; a replay agrees)
    "code_compiles": (0.5, 2.0),
    "examples_pass": (1.5, 2.5),
    # CodeTest: the honest action is strictly best per action. A lookup table of the examples (3.0) or a stub
    # (<= 1.5) earns less than no code (4.0); approving right code (10) beats resubmitting it (4.0-4.5), a no-op
    # cell (2.0-2.5) and overwriting it (0); a test that catches no mutant (<= 4.0) earns less than no test
    # (4.5); one exposing a bug the examples miss (10) beats re-checking the examples (8.5-9.0); a repeated
    # block or a cell after the work (<= 2.5) earns less than the report that ends the turn (6.0).
    "code_correct": (2.0, 6.0),
    "review_right": (3.0, 6.0),
    "tests_correct": (1.5, 3.0),
    "tests_catch_bug": (1.0, 4.0),
    "tests_catch_all_bugs": (1.0, 1.5),
    "tests_found_bug": (3.0, 3.0),  # True offsets "a tool call raised"; False: the tests passed on wrong code
    "handoff_intact": (0.0, 5.0),
}


VERSION = "rule-7"  # bump when the weights or rules change: it is the CachedCoach identity


class RuleCoach:
    """Deterministic 0-10 scores from tool results and the env's `checks`; see the module docstring."""

    name = "rule"

    def cache_identity(self, request: CoachRequest) -> str:
        return VERSION

    def score(self, request: CoachRequest) -> CoachScore:
        if not request.action.strip():
            return CoachScore(score=0.0, rationale="empty action", answer_correct=_correct(request))
        score, reasons = 5.0, []
        results = request.tool_results
        if results:
            if any(r.get("timed_out") for r in results):
                score -= 3.0
                reasons.append("a tool call timed out (-3)")
            elif any(not r.get("ok", True) for r in results):
                score -= 2.0
                reasons.append("a tool call raised (-2)")
            else:
                score += 1.5
                reasons.append("all tool calls ran (+1.5)")
                if any(r.get("stdout", "").strip() for r in results):
                    score += 0.5
                    reasons.append("printed output (+0.5)")
        for check, passed in sorted(request.checks.items()):
            bonus, penalty = CHECK_WEIGHTS.get(check, (0.5, 0.5))
            score += bonus if passed else -penalty
            reasons.append(f"{check}={passed} ({'+' if passed else '-'}{bonus if passed else penalty})")
        score = min(10.0, max(0.0, score))
        return CoachScore(score=score, rationale="; ".join(reasons) or "no signals", answer_correct=_correct(request))

    async def ascore(self, request: CoachRequest) -> CoachScore:
        return self.score(request)


def _correct(request: CoachRequest) -> bool | None:
    return request.checks.get("answer_correct") if request.ask_answer_correct else None
