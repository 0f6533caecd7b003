"""Evaluation: `mappa eval`, comparable results, the leaderboard and comparisons (docs/evaluation.md).

Modules: `metrics` (avg@k, pass@k, maj@k, mean ± SE, paired bootstrap), `runner` (play teams on eval
sets, resumable transcripts), `report` (results.json), `plots`, `leaderboard`, `compare`,
`hygiene` (train/eval overlap), `evalsets`, `teams`, `cli`. Nothing heavy is imported here.
"""
