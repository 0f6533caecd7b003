"""The quickstart's confirmation set: held-out problems that no preset was tuned on.

The held-out problems the quickstart evaluates (the first `eval_episodes` of the `product_sum` eval
stream) were looked at while the presets were developed: they are a *dev set*. The confirmation set
is the next `n` problems of the same seeded eval stream. It is evaluated with the start and with each
arm's final policy only, so no preset choice was picked on it; every evaluation plays the same
problems, k samples each, with the same seeds (`evaluation.heldout.eval_seed`), so the comparisons
are paired.

"Held out" means, precisely: disjoint *by problem text* (normalised, `evaluation.hygiene`) from the
training problems and from the dev set; the report counts both overlaps (0 and 0). `product_sum`
has about 400,000 problems and four-digit answers, so answers rarely recur either; a team that
guesses the answer (the Problem Solver) is scored wrong unless the guess is right for this problem.
"""
from __future__ import annotations

CONFIRM = "confirmation"
DEFAULT_PROBLEMS = 32


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
