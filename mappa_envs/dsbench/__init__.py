"""DSBench-v0: a data-science team (Data Engineer -> Modeler -> Analyst) on Kaggle-style modeling tasks.

    from mappa_envs.dsbench import builtin_tasks, load_dsbench, compute_metric, score_submission

The environment class is `mappa_envs.dsbench.env.DSBenchEnv` (`mappa_envs.make("DSBench-v0")`).
"""
from mappa_envs.dsbench.builtin import builtin_tasks
from mappa_envs.dsbench.metrics import METRICS, compute_metric
from mappa_envs.dsbench.scoring import SubmissionReport, relative_quality, score_submission
from mappa_envs.dsbench.tasks import DSBenchFormatError, DSTask, load_dsbench

__all__ = ["METRICS", "DSBenchFormatError", "DSTask", "SubmissionReport", "builtin_tasks", "compute_metric",
           "load_dsbench", "relative_quality", "score_submission"]
