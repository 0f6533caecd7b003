"""A judge model folder as a coach, scoring in-process: the LLM coach's prompt, the coach's own parse.

`prompt_messages` is exactly `LLMCoach`'s prompt for a request and `target_reply` the verdict written
in the format that prompt asks for (the structured JSON object or the RATIONALE/SCORE lines);
`parse_reply` reads it back, so a judge trained on (prompt, target) pairs (`mappa coach-train`)
answers in a form the coach accepts.

`LocalJudge` scores with a model folder where no server runs. `readout="text"` parses its greedy
reply. `readout="expected"` reads the verdict from the model's distribution instead: the reply is
forced to the judge's own format up to the score (`target_reply` with an empty rationale, cut before
the number) and one forward pass gives the probability of each first digit; the verdict is the
expected integer score, 1 and 10 told apart by the probability of "0" after a "1". A judge that puts
70 % on 9 and 30 % on 2 says 6.9 rather than 9, so its ranking survives where greedy text ties, and an
untrained model that never writes the format still gets read. It generates nothing (one forward per
action), which makes it the judge to train against on a CPU: the coach spec `judge:FOLDER`
(`make_coach`). A served judge (scripts/serve_judge.sh, an endpoint spec) reads text only.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from mappa_envs.coach.parse import parse_reply
from mappa_envs.coach.prompts import coach_messages, load_template
from mappa_envs.coach.types import CoachRequest, CoachScore

REPLY_FORMATS = ("json", "text")
MAX_FIELD_CHARS = 8000  # LLMCoachConfig's default: the prompt a served judge is sent
RECORD = "judge_training.json"  # what `mappa coach-train` writes into the folder: its config, counts, losses
READOUTS = ("text", "expected")


def prompt_messages(request: CoachRequest, reply: str = "json", max_field_chars: int = MAX_FIELD_CHARS) -> list[dict]:
    """The chat messages LLMCoach sends for `request` (structured output when `reply` is "json")."""
    return coach_messages(load_template(request.env_id), request, max_field_chars, structured=reply == "json")


def target_reply(score: float, rationale: str, reply: str = "json") -> str:
    """The verdict `score` (0-10) with `rationale`, written as the coach's prompt asks for it."""
    value = round(float(score), 1)
    value = int(value) if value.is_integer() else value
    rationale = " ".join(rationale.split())
    if reply == "json":
        return json.dumps({"rationale": rationale, "score": value}, ensure_ascii=False)
    return f"RATIONALE: {rationale or '-'}\nSCORE: {value}"


class LocalJudge:
    name = "local-judge"

    def __init__(self, folder: str | Path, max_new_tokens: int = 96, readout: str = "text"):
        """`folder`: any model folder; a trained judge's `judge_training.json` sets the reply format and the
        prompt cut it was trained with (otherwise JSON replies and 2048 tokens). `readout`: "text", the
        parsed greedy reply, or "expected" (see the module docstring)."""
        if readout not in READOUTS:
            raise ValueError(f"readout must be one of {', '.join(READOUTS)}, got {readout!r}")
        self.readout = readout
        self.folder = Path(folder).resolve()
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        record = self.folder / RECORD
        trained = json.loads(record.read_text()) if record.is_file() else {"config": {}}
        self.reply = trained["config"].get("reply", "json")
        # the prompt cut as training cut it: what is left of max_tokens after the longest trained reply
        self.prompt_tokens = trained["config"].get("max_tokens", 2048) - trained.get("reply_tokens", max_new_tokens)
        self.max_new_tokens = max_new_tokens
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        # the cache key: the folder, the readout, the prompt cut and when its weights were written (a
        # retrained folder is another judge); read once, not per request
        written = max((f.stat().st_mtime_ns for f in self.folder.iterdir() if f.suffix in (".safetensors", ".bin")),
                      default=0)
        self._identity = f"local-judge:{self.folder}:{self.readout}:{self.prompt_tokens}:{written}"

    def cache_identity(self, request: CoachRequest) -> str:
        return self._identity

    def answer(self, messages: list[dict]) -> str:
        """The model's greedy reply to a chat (the prompt cut to its end as training cut it)."""
        import torch

        ids = self._prompt_ids(messages)
        with torch.no_grad():
            out = self.model.generate(torch.tensor([ids]), max_new_tokens=self.max_new_tokens, do_sample=False,
                                      eos_token_id=self.tokenizer.eos_token_id,
                                      pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id)
        return self.tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)

    def _prompt_ids(self, messages: list[dict]) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return self.tokenizer(text, add_special_tokens=False).input_ids[-max(1, self.prompt_tokens):]

    def expected_score(self, request: CoachRequest) -> float:
        """The expected integer score after the reply forced up to its number (see the module docstring)."""
        import torch

        template = target_reply(0, "", self.reply)
        head = template[:template.rindex("0")]  # the reply up to where the score is written
        ids = self._prompt_ids(prompt_messages(request, self.reply))
        ids += self.tokenizer(head, add_special_tokens=False).input_ids
        digits = self._digit_ids()
        with torch.no_grad():
            out = self.model(torch.tensor([ids]), use_cache=True)
            p = torch.softmax(out.logits[0, -1].float(), -1)
            mass = {d: p[t].item() for d, t in digits.items()}
            ten = 0.0
            if mass[1] >= 1e-3:  # below it, 1-or-10 cannot move the expectation by 0.01
                after = self.model(torch.tensor([[digits[1]]]), past_key_values=out.past_key_values).logits[0, -1]
                ten = torch.softmax(after.float(), -1)[digits[0]].item()
        total = sum(mass.values())
        return (sum(d * m for d, m in mass.items()) + 9.0 * mass[1] * ten) / total

    def _digit_ids(self) -> dict[int, int]:
        """Digit -> its token id (a tokenizer that spells a digit as one token; SmolLM2's and Qwen2's do)."""
        if not hasattr(self, "_digits"):
            ids = {d: self.tokenizer(str(d), add_special_tokens=False).input_ids for d in range(10)}
            if any(len(v) != 1 for v in ids.values()):
                raise ValueError("readout='expected' needs a tokenizer with one token per digit")
            self._digits = {d: v[0] for d, v in ids.items()}
        return self._digits

    def score(self, request: CoachRequest) -> CoachScore:
        if self.readout == "expected":
            return CoachScore(score=round(self.expected_score(request), 3))
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
