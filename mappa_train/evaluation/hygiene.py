"""Train/eval hygiene: find eval problems whose text also appears in a training source.

Texts are compared after normalization (Unicode NFKC, case folded, everything but letters and
digits removed), so re-spaced, re-punctuated or re-cased copies still match; paraphrases do not.
"""
from __future__ import annotations

import re
import unicodedata
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field

_NON_ALNUM = re.compile(r"[\W_]+", re.UNICODE)


def normalize_text(text: str) -> str:
    return _NON_ALNUM.sub("", unicodedata.normalize("NFKC", text).casefold())


class OverlapWarning(UserWarning):
    """Eval problems also occur in the training source."""


@dataclass
class Overlap:
    """Which eval problems (by id) also occur in the training source."""

    eval_set: str
    train_source: str
    n_eval: int
    ids: list[str] = field(default_factory=list)

    @property
    def fraction(self) -> float:
        return len(self.ids) / self.n_eval if self.n_eval else 0.0

    def to_dict(self) -> dict:
        return {"train_source": self.train_source, "n_eval": self.n_eval, "n_overlap": len(self.ids),
                "fraction": self.fraction, "ids": self.ids}


def find_overlap(eval_set: str, eval_problems: Iterable[tuple[str, str]], train_source: str,
                 train_texts: Iterable[str]) -> Overlap:
    """`eval_problems` are (id, text) pairs; `train_texts` the training problems' texts.

    Warns (OverlapWarning) when any eval problem is also a training problem.
    """
    seen = {normalize_text(t) for t in train_texts}
    seen.discard("")
    problems = list(eval_problems)
    ids = [pid for pid, text in problems if normalize_text(text) in seen]
    overlap = Overlap(eval_set, train_source, len(problems), ids)
    if overlap.ids:
        shown = ", ".join(overlap.ids[:5]) + (" ..." if len(overlap.ids) > 5 else "")
        warnings.warn(
            f"{len(overlap.ids)}/{overlap.n_eval} problems of eval set {eval_set!r} also appear in the training "
            f"source {train_source!r} ({shown}); their scores measure memorization, not skill",
            OverlapWarning,
            stacklevel=2,
        )
    return overlap
