"""Chat messages to prompt token ids under a real chat template, checked once at start-up.

The first action of an agent's turn is prompted with its messages rendered by the tokenizer's chat
template, assistant turn opened. A later action of the same turn (a tool-using agent that has seen
its code's output) is prompted in one of two ways (`generation.continuation`):

- "append" (default): the previous prompt + the ids sampled for the previous action + the
  template's text for the new messages only: the end of the assistant turn (less the stop token
  the model already sampled), the new messages, the opening of the next assistant turn. Nothing
  earlier is re-tokenized: the model continues from its own tokens. The new text is read off one
  rendering of a stand-in chat [system, user, assistant=SENTINEL, *new messages], as the text after
  the sentinel. Nothing before it is compared, so templates that re-render history work: Qwen3
  drops the <think> block of earlier assistant turns, Llama 3 writes a dated system header. With
  Qwen3 the model then keeps its earlier thinking in view within the turn, as Qwen3's own template
  does for tool calls within a turn.
- "render": the whole chat is rendered again. The model sees the history as the template writes
  it (Qwen3 without the earlier thinking), as at inference through a chat server or `mappa eval`;
  earlier actions are re-tokenized as prompt text.

Either way the learner trains each action on exactly the ids the generator was fed.

A template without a system role (Gemma's raises "System role not supported"; others drop it)
gets the system message folded into the first user message. `ChatFormat.of` refuses, with a
TemplateError that says why and what to do, a template this module cannot handle; the trainer
calls it at start-up (and the dry-run), so a bad template never fails mid-run.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal, get_args

from mappa_envs.errors import MappaError

Continuation = Literal["append", "render"]
SENTINEL = "MAPPA-SENTINEL-7431"
_PROBE_SYSTEM, _PROBE_USER, _PROBE_TOOL = "MAPPA-SYSTEM-1", "MAPPA-USER-2", "MAPPA-TOOL-OUTPUT-3"


class TemplateError(MappaError, ValueError):
    """A chat template the rollout cannot turn into token-exact prompts; the message says why."""


@dataclass(frozen=True)
class ChatFormat:
    """How one tokenizer's chat template becomes prompt ids. Build it with `ChatFormat.of`."""

    tokenizer: Any
    continuation: Continuation
    fold_system: bool  # the template has no system role: system text goes into the first user message
    stop_token_ids: tuple[int, ...]  # tokens that end an assistant turn: eos and the template's end-of-turn

    @classmethod
    def of(cls, tokenizer, continuation: Continuation = "append") -> ChatFormat:
        """Check the template on stand-in chats shaped like the envs' and return the format; TemplateError if not."""
        if continuation not in get_args(Continuation):
            raise TemplateError(f"generation.continuation must be 'append' or 'render', got {continuation!r}")
        if not getattr(tokenizer, "chat_template", None):
            raise TemplateError("the tokenizer has no chat_template; give the model directory one "
                                "(tokenizer_config.json or chat_template.jinja)")
        fold = _needs_folding(tokenizer)
        fmt = cls(tokenizer, continuation, fold, ())
        opened = fmt.render([{"role": "user", "content": _PROBE_USER}], generation_prompt=True)
        closed = fmt.render([{"role": "user", "content": _PROBE_USER}], generation_prompt=False)
        if opened == closed:
            raise TemplateError("the chat template ignores add_generation_prompt, so a prompt never opens the "
                                "assistant's turn; use an instruct model's template")
        try:
            after = fmt._after_sentinel([{"role": "user", "content": _PROBE_TOOL}])
        except TemplateError:
            if continuation == "append":
                raise
            after = ""  # "render" never needs the continuation text; it only names the end-of-turn token
        stops = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
        end = _leading_special_id(tokenizer, after)
        if end is not None and end not in stops:
            stops.append(end)
        return cls(tokenizer, continuation, fold, tuple(stops))

    # ---- rendering -------------------------------------------------------------------------------

    def render(self, messages: list[dict], generation_prompt: bool = True) -> str:
        if self.fold_system:
            messages = fold_system(messages)
        try:
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
        except Exception as e:  # jinja's raise_exception, or a template bug
            raise TemplateError(f"the chat template cannot render the env's messages "
                                f"(roles {[m['role'] for m in messages]}): {e}") from e

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        """Ids of `messages` rendered by the template, assistant turn opened (an agent's first action)."""
        return self.tokenizer.encode(self.render(messages), add_special_tokens=False)

    def next_prompt_ids(self, previous: list[int], messages: list[dict], seen: int,
                        stop_token: int | None) -> list[int]:
        """The prompt of an agent's next action in the same turn.

        `previous` is the last prompt + the ids sampled for it; `messages[seen]` is that action as the
        env recorded it and `messages[seen + 1:]` are the new messages (the tool output);
        `stop_token` is the id that ended the sampled action (None if it was cut at max_new_tokens).
        """
        if self.continuation == "render":
            return self.prompt_ids(messages)
        text = self._after_sentinel(messages[seen + 1:])
        if stop_token is not None:
            stop_text = self.tokenizer.decode([stop_token], skip_special_tokens=False)
            if stop_text and text.startswith(stop_text):
                text = text[len(stop_text):]
        return list(previous) + self.tokenizer.encode(text, add_special_tokens=False)

    def _after_sentinel(self, new_messages: list[dict]) -> str:
        """The template's text after an assistant message when `new_messages` follow it."""
        chat = [{"role": "system", "content": _PROBE_SYSTEM}, {"role": "user", "content": _PROBE_USER},
                {"role": "assistant", "content": SENTINEL}, *new_messages]
        text = self.render(chat)
        if text.count(SENTINEL) != 1:
            raise TemplateError("the chat template does not write an earlier assistant message verbatim, so its "
                                "continuation cannot be found; set generation.continuation=render")
        after = text[text.index(SENTINEL) + len(SENTINEL):]
        if any(m["content"].strip() and m["content"].strip() not in after for m in new_messages):
            raise TemplateError("the chat template drops messages that follow an assistant message; "
                                "set generation.continuation=render")
        return after


def fold_system(messages: list[dict]) -> list[dict]:
    """The system message (if first) prepended to the first user message, for templates without a system role."""
    if not messages or messages[0]["role"] != "system":
        return list(messages)
    system, rest = messages[0]["content"], list(messages[1:])
    for i, m in enumerate(rest):
        if m["role"] == "user":
            rest[i] = {**m, "content": f"{system}\n\n{m['content']}"}
            return rest
    return [{"role": "user", "content": system}, *rest]


def _needs_folding(tokenizer) -> bool:
    """True when the template refuses or drops a system message but renders the chat without one."""
    chat = [{"role": "system", "content": _PROBE_SYSTEM}, {"role": "user", "content": _PROBE_USER}]
    try:
        if _PROBE_SYSTEM in tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True):
            return False
    except Exception:  # noqa: BLE001 - "System role not supported" and the like
        pass
    try:
        tokenizer.apply_chat_template(fold_system(chat), tokenize=False, add_generation_prompt=True)
    except Exception as e:  # noqa: BLE001
        raise TemplateError(f"the chat template cannot render a system + user chat, even folded: {e}") from e
    return True


def _leading_special_id(tokenizer, text: str) -> int | None:
    """The id of the special token `text` starts with (the template's end-of-turn marker), if any."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    special = {i for i, t in tokenizer.added_tokens_decoder.items() if t.special} | set(tokenizer.all_special_ids)
    return ids[0] if ids and ids[0] in special else None


# ---- what the env judged ---------------------------------------------------------------------------

_CUT = re.compile(r"cut to max_action_chars=(\d+)")


def env_cut_chars(input_error: str | None) -> int | None:
    """How many characters of the action the env kept, if it cut the action (else None).

    An error that mentions a cut without the count gives 0: nothing of the action is trusted.
    """
    if not input_error or "cut" not in input_error:
        return None
    match = _CUT.search(input_error)
    return int(match.group(1)) if match else 0


def judged_prefix(tokenizer, token_ids: list[int], kept_chars: int) -> int:
    """How many leading `token_ids` decode to text within the env's first `kept_chars` characters."""
    lo, hi = 0, len(token_ids)
    while lo < hi:  # the longest prefix whose decoded text fits (decoded length grows with the prefix)
        mid = (lo + hi + 1) // 2
        if len(tokenizer.decode(token_ids[:mid], skip_special_tokens=True)) <= kept_chars:
            lo = mid
        else:
            hi = mid - 1
    return lo
