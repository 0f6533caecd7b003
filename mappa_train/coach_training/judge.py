"""A judge model folder scoring in-process: the coach's prompt, a greedy reply, the coach's own parse.

`LocalJudge` is a `Coach` for measuring a trained judge where no server runs (tests, the benchmark);
in training and `mappa coach-eval` the same folder is served (scripts/serve_judge.sh, vLLM) and named
by an endpoint spec, which sends the same prompt and reads the reply with the same `parse_reply`.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from mappa_envs.coach.parse import parse_reply
from mappa_envs.coach.types import CoachRequest, CoachScore
from mappa_train.coach_training.format import prompt_messages
from mappa_train.coach_training.train import RECORD


class LocalJudge:
    name = "local-judge"

    def __init__(self, folder: str | Path, max_new_tokens: int = 96):
        """`folder`: any model folder; a trained judge's `judge_training.json` sets the reply format and the
        prompt cut it was trained with (otherwise JSON replies and 2048 tokens)."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        record = Path(folder) / RECORD
        trained = json.loads(record.read_text()) if record.is_file() else {"config": {}}
        self.reply = trained["config"].get("reply", "json")
        # the prompt cut as training cut it: what is left of max_tokens after the longest trained reply
        self.prompt_tokens = trained["config"].get("max_tokens", 2048) - trained.get("reply_tokens", max_new_tokens)
        self.max_new_tokens = max_new_tokens
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()

    def answer(self, messages: list[dict]) -> str:
        """The model's greedy reply to a chat (the prompt cut to its end as training cut it)."""
        import torch

        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = self.tokenizer(text, add_special_tokens=False).input_ids[-max(1, self.prompt_tokens):]
        with torch.no_grad():
            out = self.model.generate(torch.tensor([ids]), max_new_tokens=self.max_new_tokens, do_sample=False,
                                      eos_token_id=self.tokenizer.eos_token_id,
                                      pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id)
        return self.tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)

    def score(self, request: CoachRequest) -> CoachScore:
        verdict = parse_reply(self.answer(prompt_messages(request, self.reply)))
        if verdict.score is None:
            return CoachScore(score=None, ok=False, error=verdict.problem, rationale=verdict.rationale)
        return CoachScore(score=verdict.score, rationale=verdict.rationale)

    async def ascore(self, request: CoachRequest) -> CoachScore:
        return self.score(request)


def auroc_of(judge, requests: Sequence[CoachRequest], labels: Sequence[bool]) -> tuple[float | None, int]:
    """(AUROC of the judge's scores for `labels`, how many replies gave no score); an unscored action
    counts as 5, the midpoint: a judge that never answers ranks at chance, not at its best."""
    from mappa_envs.coach_eval.metrics import auroc

    scores = [judge.score(r) for r in requests]
    values = [s.score if s.ok and s.score is not None else 5.0 for s in scores]
    return auroc(values, list(labels)), sum(not s.ok for s in scores)
