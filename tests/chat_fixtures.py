"""Small tokenizers that speak real chat templates: mappa_train.tiny_model's BPE tokenizer with a model
family's template (tests/fixtures/chat_templates) swapped in and that family's special tokens added."""
from __future__ import annotations

import functools
import tempfile
from pathlib import Path

TEMPLATES = Path(__file__).parent / "fixtures" / "chat_templates"
CHATML = {"specials": ["<|im_start|>", "<|im_end|>"], "eos": "<|im_end|>", "bos": None}
QWEN3 = {**CHATML, "added": ["<think>", "</think>"]}  # added, not special: they decode as text
FAMILIES = {
    "qwen3": QWEN3,
    "qwen3-thinking-2507": QWEN3,
    "qwen3-instruct-2507": QWEN3,
    "llama-3.1": {"specials": ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
                  "eos": "<|eot_id|>", "bos": "<|begin_of_text|>"},
    "llama-3.2": {"specials": ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
                  "eos": "<|eot_id|>", "bos": "<|begin_of_text|>"},
    "gemma-2": {"specials": ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"], "eos": "<eos>", "bos": "<bos>"},
    "smollm2": CHATML,
}


@functools.lru_cache(maxsize=1)
def _base_dir() -> str:
    from mappa_train.tiny_model import build_tokenizer

    out = tempfile.mkdtemp(prefix="mappa-chat-tok-")
    build_tokenizer(Path(out), vocab_size=1024)
    return out


def family_tokenizer(name: str):
    """A fresh tokenizer with `name`'s real template and special tokens."""
    from transformers import AutoTokenizer

    spec = FAMILIES[name]
    tok = AutoTokenizer.from_pretrained(_base_dir())
    tok.add_special_tokens({"additional_special_tokens": spec["specials"]})
    tok.add_tokens(spec.get("added", []))
    tok.eos_token = spec["eos"]
    tok.bos_token = spec["bos"]
    tok.chat_template = (TEMPLATES / f"{name}.jinja").read_text()
    return tok
