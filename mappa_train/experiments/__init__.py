"""Experiments built on the trainer, not parts of it: the quickstart (`quickstart`, with its confirmation set
and summary over seeds), the ablation (`ablate`), and the warm start both begin from (`warm_start`).
Their command lines are in `mappa_cli` (`mappa quickstart`, `mappa ablate`)."""
