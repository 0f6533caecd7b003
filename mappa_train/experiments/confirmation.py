"""The quickstart's confirmation set: held-out problems that no preset was tuned on.

The held-out problems the quickstart evaluates during training (the first `eval_episodes`, 48, of the
`digit_product_sum` eval stream) were looked at while the presets were developed: they are a *dev
set*. The confirmation set is the next `n` (34) problems of the same seeded eval stream, the rest of
that family's eval pool (82 problems in all). It is evaluated twice only, with the warm start and
with the final policy, never during training, so no preset choice and no stopping step was picked
on it; both evaluations play the same problems, k samples each, with the same seeds
(`evaluation.heldout.eval_seed`), so their comparison is paired.

"Held out" means, precisely: disjoint *by problem text* (normalised, `evaluation.hygiene`) from the
training problems and from the dev set; the report counts both overlaps (0 and 0). Answers do recur
(a one-digit product plus a digit has few values: 33 of the 34 answers are also answers of training
problems) and so do commuted twins ("3 * 9 + 4" here, "9 * 3 + 4" in training: 21 of the 34). The
family is too small for more; a team that copies the problem's digits into code gains nothing from
having seen a twin's answer, and one that guesses the answer (the Problem Solver) is scored wrong
unless the guess is right for this problem's digits.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

CONFIRM = "confirmation"
DEFAULT_PROBLEMS = 34  # digit_product_sum's eval pool is 82 problems; the dev set takes 48


def confirmation_tasks(cfg, dev_kwargs: dict, n: int = DEFAULT_PROBLEMS) -> tuple[list[dict], dict]:
    """The `n` eval-stream problems after the dev set's first `cfg.eval_episodes`, as task records, and
    their overlap (by text) with the training problems and the dev set."""
    import mappa_envs
    from mappa_train.evaluation.hygiene import find_overlap

    dev_n = cfg.eval_episodes
    kwargs = {**dev_kwargs, "num_tasks": dev_n + n}
    tasks = {}
    for name, kw in (("train", cfg.env.kwargs), ("dev", dev_kwargs), ("stream", kwargs)):
        env = mappa_envs.make(cfg.env.id, sandbox="local", **kw)
        tasks[name] = env.unwrapped.tasks
        env.close()
    dev = tasks["dev"][:dev_n]
    if [t.prompt for t in tasks["stream"][:dev_n]] != [t.prompt for t in dev]:
        raise RuntimeError("the held-out stream is not prefix-stable: a longer one does not start with the dev set, "
                           "so its tail is not known to be unused")
    chosen = tasks["stream"][dev_n:]
    records = [{"id": f"confirm-{t.id.rsplit('-', 1)[-1]}", "prompt": t.prompt, "answer": t.answer} for t in chosen]
    pairs = [(r["id"], r["prompt"]) for r in records]
    overlap = {"training_problems": len(tasks["train"]),
               "overlapping": len(find_overlap(CONFIRM, pairs, "training problems",
                                               [t.prompt for t in tasks["train"]]).ids),
               "overlapping_dev": len(find_overlap(CONFIRM, pairs, "dev set", [t.prompt for t in dev]).ids)}
    return records, overlap


def evaluate(cfg, records: list[dict], model_path: Path, out: Path, step: int) -> None:
    """Play the confirmation set with the policy at `model_path` (k = eval_samples, eval temperature,
    `eval_seed`), appending its episodes to out/eval_episodes.jsonl under set "confirmation", `step`."""
    from mappa_train.evaluation.heldout import eval_seed
    from mappa_train.factories import local_experience
    from mappa_train.runlog import append_eval_episodes

    env = dataclasses.replace(cfg.env, eval_sets={CONFIRM: {"split": "eval", "task_source": records}})
    run_cfg = dataclasses.replace(cfg, env=env, model=dataclasses.replace(cfg.model, path=str(model_path)))
    experience = local_experience(run_cfg, model_path)
    try:
        chosen = [t for t in experience.eval_tasks[CONFIRM] for _ in range(cfg.eval_samples)]
        result = experience.collect(chosen, eval_seed(cfg), CONFIRM)
    finally:
        experience.close()
    append_eval_episodes(out, step, CONFIRM, result.episodes, cfg.eval_samples)


def summary(out: Path, first: int, last: int, overlap: dict, n_boot: int, seed: int) -> dict:
    """report.json's `confirmation`: problems, accuracy before and after, the paired bootstrap of the change."""
    from mappa_train.evaluation.stats import accuracy_change

    tasks, before, after, ci = accuracy_change(out, CONFIRM, first, last, n_boot, seed)
    return {"problems": len(tasks), "accuracy_before": sum(before) / len(before),
            "accuracy_after": sum(after) / len(after), "accuracy_delta": ci.delta,
            "accuracy_delta_ci95": [ci.low, ci.high], **overlap}
