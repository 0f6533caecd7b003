"""Evaluation: comparable results of agent teams on eval sets, the leaderboard and comparisons
(docs/evaluation.md; the command line is `mappa_cli.eval`).

Modules: `stats` (avg@k, pass@k, maj@k, mean ± SE, paired bootstrap), `runner` (play teams on eval
sets, resumable transcripts; `evaluate_team`), `report` (results.json), `plots`, `leaderboard`,
`compare`, `hygiene` (train/eval overlap), `evalsets`, `teams`, `heldout` (a training run's held-out
evaluation). Nothing heavy is imported here.
"""
