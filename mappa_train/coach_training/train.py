"""`train_judge`: fine-tune a causal LM to answer the coach's prompt with the labelled verdict.

Supervised next-token loss on the reply only (the prompt's tokens are context, not targets), a fixed
number of seeded AdamW steps over shuffled examples, LoRA (merged into the weights at the end) or the
full model. With `balance`, every batch draws right (verdict >= 5) and wrong actions in turn: rule
labels are mostly right (70 % of Chain-v0's are 9.0), and a judge trained on them as they come learns
to give every action the majority's verdict. Weights stay float32; forward and backward run under bf16 autocast where
`mappa_train.precision` says this machine multiplies bf16 fast. The result is a plain transformers
folder (weights, tokenizer, `judge_training.json`) written aside and moved into `out` at the end, so a
failed run leaves no half-written folder; held-out actions go to `out/heldout/` as a labels dataset
that `mappa coach-eval --labels` reads, so any coach (this one served, or the untrained base) is
measured on exactly the tasks this judge never saw.
"""
from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mappa_envs.coach.judge import RECORD, REPLY_FORMATS, prompt_messages, target_reply
from mappa_train.coach_training.examples import LabelError, Labelled
from mappa_train.export import check_new, new_folder

HELDOUT_DIR = "heldout"
RIGHT = 5.0  # a verdict at or above it calls the action right (the held-out labels' `label`, --balance's classes)


@dataclass
class JudgeTrainConfig:
    model: str = "smollm2-135m"  # anything model.path takes: a built-in name, "tiny", a folder, a .gguf, a hub id
    steps: int = 200  # optimizer steps
    batch_size: int = 4
    lr: float = 2e-4
    lora: bool = True  # False: every weight is trained (or, with top_layers, the top layers' weights)
    top_layers: int = 0  # without LoRA: train only the last N transformer layers and the final norm (0: all);
    # the backward pass then stops at them, a step costs little more than a forward pass
    lora_rank: int = 16
    lora_targets: list = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    reply: str = "json"  # "json": the structured-output schema; "text": RATIONALE/SCORE lines
    rationale_chars: int = 160  # the label's rationale, cut to this; 0 trains an empty rationale (fast replies)
    max_tokens: int = 2048  # prompt + reply; a longer prompt keeps its end (the evidence and the reply format)
    dtype: str = "auto"  # as model.dtype: "auto", "bfloat16" or "float32"
    balance: bool = False  # draw right (>= 5) and wrong actions in turn, whatever their share of the labels
    seed: int = 0

    def check(self) -> None:
        if self.reply not in REPLY_FORMATS:
            raise LabelError(f"--reply must be one of {', '.join(REPLY_FORMATS)}, got {self.reply!r}")
        if min(self.steps, self.batch_size, self.lora_rank, self.max_tokens) < 1 or self.rationale_chars < 0:
            raise LabelError("--steps, --batch-size, --lora-rank and --max-tokens must be >= 1, --rationale-chars >= 0")
        if self.top_layers < 0 or (self.top_layers and self.lora):
            raise LabelError("--top-layers N (>= 1) trains the top N layers of a full fine-tune: give it with --full")
        if not 0 < self.lr < math.inf:
            raise LabelError(f"--lr must be a finite number above 0, got {self.lr}")


def encode(tokenizer, example: Labelled, cfg: JudgeTrainConfig) -> tuple[list[int], int, bool]:
    """(token ids of prompt + reply + end of turn, how many of them are the prompt, whether it was cut)."""
    messages = prompt_messages(example.request, cfg.reply)
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    reply = target_reply(example.score, example.rationale[:cfg.rationale_chars], cfg.reply) + tokenizer.eos_token
    prompt_ids = tokenizer(prompt, add_special_tokens=False).input_ids
    reply_ids = tokenizer(reply, add_special_tokens=False).input_ids
    room = cfg.max_tokens - len(reply_ids)
    if room < 1:
        raise LabelError(f"--max-tokens {cfg.max_tokens} leaves no room for the prompt; raise it or lower "
                         "--rationale-chars")
    cut = len(prompt_ids) > room
    prompt_ids = prompt_ids[-room:]
    return prompt_ids + reply_ids, len(prompt_ids), cut


def train_judge(train: Sequence[Labelled], heldout: Sequence[Labelled], out: str | Path, cfg: JudgeTrainConfig,
                say=print) -> dict:
    """Fine-tune `cfg.model` on `train`, write it to `out` (with `heldout` as a labels dataset); the record."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mappa_train.model_source import resolve_model
    from mappa_train.precision import resolve_precision

    out = Path(out)
    cfg.check()
    check_new(out)
    if not train:
        raise LabelError("no training examples are left after the split by task; lower --heldout or add labels")
    draw = sampler([ex.score for ex in train], cfg.balance, random.Random(cfg.seed))
    base = resolve_model(cfg.model, label=f"--model {cfg.model!r}")
    precision = resolve_precision(cfg.dtype)
    say(precision.describe())
    torch.manual_seed(cfg.seed)
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    if cfg.lora:
        from mappa_train.config.schema import LoraConfig
        from mappa_train.lora import add_adapters

        model = add_adapters(model, LoraConfig(rank=cfg.lora_rank, alpha=2.0 * cfg.lora_rank,
                                               target_modules=list(cfg.lora_targets)), ["judge"])
    elif cfg.top_layers:
        freeze_below(model, cfg.top_layers)
    encoded = [encode(tokenizer, ex, cfg) for ex in train]
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    losses: list[float] = []
    model.train()
    for step in range(cfg.steps):
        batch = [encoded[draw()] for _ in range(cfg.batch_size)]
        loss = _loss(model, batch, tokenizer.pad_token_id or 0, precision.torch_dtype)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        losses.append(loss.item())
        if step == 0 or (step + 1) % max(1, cfg.steps // 10) == 0:
            say(f"step {step + 1}/{cfg.steps}: loss {losses[-1]:.4f}")
    if cfg.lora:
        model = model.merge_and_unload()
    record = {"config": asdict(cfg), "base": str(base), "precision": precision.dtype,
              "train_actions": len(train), "train_right": sum(ex.score >= RIGHT for ex in train),
              "train_tasks": len({ex.task_key for ex in train}),
              "heldout_actions": len(heldout), "heldout_tasks": len({ex.task_key for ex in heldout}),
              "prompts_cut": sum(cut for _, _, cut in encoded),
              "reply_tokens": max(len(ids) - n for ids, n, _ in encoded),  # the longest reply, end of turn included
              "sources": sorted({ex.source for ex in train}), "loss_first": losses[0], "loss_last": losses[-1]}
    _write(model, tokenizer, heldout, record, out)
    return record


def freeze_below(model, top: int) -> None:
    """Leave only the last `top` decoder layers and the final norm trainable (a Llama/Qwen-shaped model:
    `model.model.layers`, `model.model.norm`); the embeddings, tied to the output head, stay as they are."""
    layers = model.model.layers
    if top > len(layers):
        raise LabelError(f"--top-layers {top} is more than the model's {len(layers)} layers")
    model.requires_grad_(False)
    for module in (*layers[-top:], model.model.norm):
        module.requires_grad_(True)


def sampler(scores: Sequence[float], balance: bool, rng: random.Random):
    """A function giving the next example's index: shuffled passes over all of them, or with `balance`
    shuffled passes over the right (score >= 5) and the wrong ones in turn."""
    classes = [list(range(len(scores)))]
    if balance:
        classes = [[i for i, s in enumerate(scores) if s >= RIGHT], [i for i, s in enumerate(scores) if s < RIGHT]]
        if not all(classes):
            raise LabelError("--balance needs right (verdict >= 5) and wrong actions among the training labels; "
                             f"these are all {'right' if classes[0] else 'wrong'}: drop --balance or add labels")
    queues: list[list[int]] = [[] for _ in classes]
    turn = [rng.randrange(2) if balance else 0]  # which class the first batch starts with

    def draw() -> int:
        k = turn[0] = (turn[0] + 1) % len(classes)
        if not queues[k]:
            queues[k] = list(classes[k])
            rng.shuffle(queues[k])
        return queues[k].pop()

    return draw


def _loss(model, batch: list[tuple[list[int], int, bool]], pad_id: int, dtype):
    """Mean cross-entropy over the reply tokens of a right-padded batch."""
    import torch

    width = max(len(ids) for ids, _, _ in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (tokens, prompt_len, _) in enumerate(batch):
        ids[row, :len(tokens)] = torch.tensor(tokens)
        labels[row, prompt_len:len(tokens)] = torch.tensor(tokens[prompt_len:])
        mask[row, :len(tokens)] = 1
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        logits = model(input_ids=ids, attention_mask=mask).logits
    logits = logits[:, :-1].float()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                                             ignore_index=-100)


def _write(model, tokenizer, heldout: Sequence[Labelled], record: dict, out: Path) -> None:
    with new_folder(out) as partial:
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        if heldout:
            heldout_dataset(heldout).save_to_disk(str(partial / HELDOUT_DIR))
        (partial / RECORD).write_text(json.dumps(record, indent=2))


def heldout_dataset(examples: Sequence[Labelled]):
    """The held-out actions as a labels dataset (`mappa export labels`' columns that `load_labels` and
    `coach-eval --labels` read): `label` is the verdict >= 5, `human_score` the verdict, `coach_score` too."""
    import datasets

    rows = [{"env_id": ex.request.env_id, "task_id": "", "role": ex.request.role, "task": ex.request.task,
             "action": ex.request.action, "request": json.dumps(ex.request.to_dict(), ensure_ascii=False, default=str),
             "label": ex.score >= RIGHT, "human_score": ex.score, "human_right": None, "coach_score": ex.score,
             "coach_rationale": ex.rationale, "note": ex.source} for ex in examples]
    features = datasets.Features({
        **{k: datasets.Value("string") for k in ("env_id", "task_id", "role", "task", "action", "request",
                                                 "coach_rationale", "note")},
        "label": datasets.Value("bool"), "human_right": datasets.Value("bool"),
        "human_score": datasets.Value("float64"), "coach_score": datasets.Value("float64")})
    return datasets.Dataset.from_list(rows, features=features)
