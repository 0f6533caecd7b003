"""Token-exact prompts under real chat templates (Qwen3 hybrid and 2507, Llama 3.1/3.2, Gemma 2, SmolLM2).

A small tokenizer speaks each family's real template (tests/fixtures/chat_templates). The second and
later actions of a turn are prompted with exactly the ids the learner trains on: in "append" mode
the previous prompt + the sampled ids + the template's own text for the new messages; in "render"
mode the whole chat rendered again. A template the code cannot handle is refused up front.
"""
import itertools

import pytest

pytest.importorskip("transformers")

import mappa_envs
from mappa_envs.core.pipeline import Task
from mappa_envs.mathchat import prompts as duties
from mappa_envs.sandbox import make_sandbox
from mappa_train.chat_tokens import ChatFormat, TemplateError, env_cut_chars, fold_system, judged_prefix
from mappa_train.generation import Generation, SamplingParams, chat_prompt_ids, stop_ids
from mappa_train.rollout import collect
from tests.chat_fixtures import FAMILIES, family_tokenizer

END_OF_TURN = {"llama-3.1": "<|eot_id|>", "llama-3.2": "<|eot_id|>", "gemma-2": "<end_of_turn>"}
SYSTEM = {"role": "system", "content": "You are the Code Executor. Write Python."}
USER = {"role": "user", "content": "Problem:\nWhat is 6 times 7?"}


def sampled_text(family: str, k: int) -> str:
    """What a model of this family writes for its k-th action (Qwen3 thinking models think first)."""
    body = f"```python\nx = {k} * 7\nprint(x)\n```"
    if family == "qwen3-thinking-2507":  # the generation prompt already opened <think>
        return f"I multiply {k} by 7.\n</think>\n\n{body}"
    if family == "qwen3":
        return f"<think>\nI multiply {k} by 7.\n</think>\n\n{body}"
    return body


def end_id(tok, family):
    return tok.convert_tokens_to_ids(END_OF_TURN.get(family, "<|im_end|>"))


@pytest.mark.parametrize("family", FAMILIES)
def test_append_continues_the_sampled_ids_with_the_templates_own_text(family):
    tok = family_tokenizer(family)
    fmt = ChatFormat.of(tok, "append")
    assert end_id(tok, family) in fmt.stop_token_ids  # generation stops where the template ends a turn
    messages = [SYSTEM, USER]
    prompt = fmt.prompt_ids(messages)
    for k in range(3):
        action = tok.encode(sampled_text(family, k), add_special_tokens=False) + [end_id(tok, family)]
        seen = len(messages)
        messages = messages + [{"role": "assistant", "content": tok.decode(action, skip_special_tokens=True)},
                               {"role": "user", "content": f"Output of your code:\n{7 * k}"}]
        following = fmt.next_prompt_ids(prompt + action, messages, seen, stop_token=action[-1])
        assert following[:len(prompt) + len(action)] == prompt + action  # nothing sampled is re-tokenized
        appended = tok.decode(following[len(prompt) + len(action):], skip_special_tokens=False)
        rendered = fmt.render(messages)
        # the appended ids are exactly the template's text after the assistant message's end-of-turn token
        assert rendered.endswith(tok.decode([action[-1]], skip_special_tokens=False) + appended)
        assert f"Output of your code:\n{7 * k}" in appended
        assert appended.count(f"{7 * k}") == 1
        if family in ("qwen3", "qwen3-thinking-2507"):  # why "render again, take the new suffix" cannot work here
            assert not rendered.startswith(tok.decode(prompt + action, skip_special_tokens=False))
        prompt = following


@pytest.mark.parametrize("family", FAMILIES)
def test_render_prompts_the_whole_chat_as_the_template_writes_it(family):
    tok = family_tokenizer(family)
    fmt = ChatFormat.of(tok, "render")
    messages = [SYSTEM, USER, {"role": "assistant", "content": sampled_text(family, 1)},
                {"role": "user", "content": "Output of your code:\n7"}]
    ids = fmt.next_prompt_ids([1, 2, 3], messages, 2, stop_token=None)
    assert ids == fmt.prompt_ids(messages) == tok.encode(fmt.render(messages), add_special_tokens=False)
    assert ids == chat_prompt_ids(tok, messages)


def test_family_specific_renderings():
    qwen = family_tokenizer("qwen3-thinking-2507")
    assert ChatFormat.of(qwen).render([SYSTEM, USER]).endswith("<|im_start|>assistant\n<think>\n")
    llama = ChatFormat.of(family_tokenizer("llama-3.2"))
    assert "Cutting Knowledge Date: December 2023\nToday Date: " in llama.render([SYSTEM, USER])
    gemma = ChatFormat.of(family_tokenizer("gemma-2"))  # "System role not supported": folded into the user turn
    assert gemma.fold_system
    assert not ChatFormat.of(family_tokenizer("smollm2")).fold_system
    assert gemma.render([SYSTEM, USER]) == ("<bos><start_of_turn>user\nYou are the Code Executor. Write Python.\n\n"
                                            "Problem:\nWhat is 6 times 7?<end_of_turn>\n<start_of_turn>model\n")
    tok = family_tokenizer("gemma-2")  # Gemma's eos is <eos>, its turns end with <end_of_turn>: both stop
    assert stop_ids(tok, SamplingParams()) == [tok.eos_token_id, tok.convert_tokens_to_ids("<end_of_turn>")]
    assert fold_system([SYSTEM]) == [{"role": "user", "content": SYSTEM["content"]}]


def test_templates_the_code_cannot_handle_are_refused_up_front():
    tok = family_tokenizer("smollm2")
    tok.chat_template = None
    with pytest.raises(TemplateError, match="no chat_template"):
        ChatFormat.of(tok)
    tok.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    with pytest.raises(TemplateError, match="ignores add_generation_prompt"):
        ChatFormat.of(tok, "render")
    # a template that keeps only the last user message: earlier assistant text is gone
    tok.chat_template = ("{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list "
                         "| last }}"
                         "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    with pytest.raises(TemplateError, match="continuation=render"):
        ChatFormat.of(tok, "append")
    assert ChatFormat.of(tok, "render").prompt_ids([SYSTEM, USER])  # re-rendering needs no continuation
    tok.chat_template = "{{ raise_exception('no chats here') }}"
    with pytest.raises(TemplateError, match="no chats here"):
        ChatFormat.of(tok)
    with pytest.raises(TemplateError, match="'append' or 'render'"):
        ChatFormat.of(family_tokenizer("smollm2"), "splice")


def test_env_cut_actions_keep_the_judged_token_prefix():
    tok = family_tokenizer("smollm2")
    assert env_cut_chars(None) is None
    assert env_cut_chars("empty action") is None
    assert env_cut_chars("action of 20000 chars cut to max_action_chars=16000; NUL characters removed") == 16000
    assert env_cut_chars("action was cut") == 0  # a cut the code cannot size: nothing is trusted
    ids = tok.encode("print(12345)\n" * 10, add_special_tokens=False) + [tok.eos_token_id]
    text = tok.decode(ids, skip_special_tokens=True)
    for kept in (0, 1, 13, 40, len(text), len(text) + 5):
        n = judged_prefix(tok, ids, kept)
        assert len(tok.decode(ids[:n], skip_special_tokens=True)) <= kept
        assert n == len(ids) or len(tok.decode(ids[:n + 1], skip_special_tokens=True)) > kept  # the longest such


# ---- through the real rollout and MathChat env --------------------------------------------------------

ROLES = {"problem_solver": duties.PROBLEM_SOLVER, "code_executor": duties.CODE_EXECUTOR, "verifier": duties.VERIFIER}


class Scripted:
    """Answers each role from a script; records every prompt it was fed and what it returned."""

    def __init__(self, tok, family):
        self.tokenizer, self.family, self.fed = tok, family, []
        self.turns = {"problem_solver": itertools.cycle(["Six times seven. \\boxed{42}"]),
                      "code_executor": itertools.cycle([sampled_text(family, 6), sampled_text(family, 6),
                                                        "It printed 42. \\boxed{42}"]),
                      "verifier": itertools.cycle(["Checked. \\boxed{42}"])}

    def generate(self, prompts, params):
        out = []
        for p in prompts:
            role = next(r for r, text in ROLES.items() if text[:80] in self.tokenizer.decode(p))
            ids = self.tokenizer.encode(next(self.turns[role]), add_special_tokens=False)
            ids.append(end_id(self.tokenizer, self.family))
            out.append(Generation(ids, [0.0] * len(ids), self.tokenizer.decode(ids, skip_special_tokens=True), "stop"))
            self.fed.append((list(p), ids))
        return out

    def load_weights(self, named_tensors):
        raise NotImplementedError


@pytest.fixture(scope="module")
def sandbox():
    sb = make_sandbox("local", pool_size=1, preimport=(), timeout_s=20)
    yield sb
    sb.close()


@pytest.mark.parametrize("continuation", ["append", "render"])
@pytest.mark.parametrize("family", FAMILIES)
def test_every_trained_sample_is_exactly_what_the_generator_was_fed(family, continuation, sandbox):
    tok = family_tokenizer(family)
    gen = Scripted(tok, family)
    tasks = [Task(id="t", prompt="What is 6 times 7?", answer="42")]
    env = mappa_envs.make("MathChat-v0", tasks=tasks, sandbox=sandbox)
    try:
        rollout = collect([env], gen, SamplingParams(max_new_tokens=64), [{"seed": 0, "options": {"task_id": "t"}}],
                          continuation=continuation)
    finally:
        env.close()
    assert [(t.prompt_ids, t.action_ids) for t in rollout.transitions] == gen.fed
    executor = [t for t in rollout.transitions if t.role == "code_executor"]
    assert [t.turn_index for t in executor] == [0, 1, 2]
    assert rollout.episodes[0].correct
    if continuation == "append":  # each later prompt extends the previous prompt and its sampled ids
        for prev, t in zip(executor, executor[1:]):
            assert t.prompt_ids[:len(prev.prompt_ids) + len(prev.action_ids)] == prev.prompt_ids + prev.action_ids


def test_training_refuses_a_bad_template_before_anything_starts(tmp_path, monkeypatch):
    from mappa_train import train as driver
    from mappa_train.config import load_config
    from mappa_train.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "m")
    tok = family_tokenizer("smollm2")
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    tok.save_pretrained(model)
    monkeypatch.setattr(driver, "local_experience", lambda *a: pytest.fail("rollouts started with a bad template"))
    cfg = load_config(None, [f"model.path={model}", f"out_dir={tmp_path / 'run'}"])
    with pytest.raises(TemplateError, match="ignores add_generation_prompt"):
        driver.train(cfg)
