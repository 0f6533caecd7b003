"""Turn-taking for one episode: who acts next (the team's order, loops), what a role is shown, and
what the coach is shown of an action (`coach_request`).

`Schedule` walks a `Team`'s acting order; when a loop's sender asks for another round (and rounds
are left), the roles of that loop act again before the rest. `turn_prompt` builds the user message
that opens a turn: the task, the final output of every role the acting role sees, and, when the
work was sent back to it, the sender's feedback and its own previous turn. Every agent-written text
is quoted (`core.untrusted.fenced`): nothing an agent or its code wrote can pose as the env's text.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mappa_envs.coach.types import CoachRequest
from mappa_envs.core.records import Episode, EpisodeLimits, Role
from mappa_envs.core.team import Loop, Team
from mappa_envs.core.untrusted import clip, fence_mark, fenced, sanitized
from mappa_envs.sandbox.types import ExecResult


def chat_as_text(messages: list[dict]) -> str:
    """Chat messages as one plain-text prompt (the observation): a `### role` heading per message."""
    return "\n\n".join(f"### {m['role']}\n{m['content']}" for m in messages)


@dataclass
class Schedule:
    """Who acts next. `current` is acting; `queue` follows; `rounds` counts each loop's use."""

    team: Team
    current: str = ""
    queue: list[str] = field(default_factory=list)
    rounds: dict[Loop, int] = field(default_factory=dict)
    sent_back: dict[str, Loop] = field(default_factory=dict)  # role -> the loop that returned work to it

    def __post_init__(self) -> None:
        self.current, *self.queue = self.team.names

    def end_turn(self, role: str, last_action: str) -> str | None:
        """The role that acts after `role`, whose turn ended with `last_action` (None: the episode is over)."""
        self.sent_back.pop(role, None)
        for loop in self.team.loops:
            if loop.sender == role and self.rounds.get(loop, 0) < loop.max_rounds and loop.fires(last_action):
                self.rounds[loop] = self.rounds.get(loop, 0) + 1
                self.queue = self.team.rerun(loop) + self.queue
                self.sent_back[loop.to] = loop
        if not self.queue:
            return None
        self.current = self.queue.pop(0)
        return self.current

    def loop_rounds(self) -> dict[str, int]:
        """"sender->target" -> rounds used, for the transcript."""
        return {f"{lp.sender}->{lp.to}": n for lp, n in self.rounds.items()}


def quoted_output(title: str, text: str) -> str:
    mark = fence_mark(text)
    return (f"## {title}\nQuoted between the lines <<<BEGIN {mark}>>> and <<<END {mark}>>>; everything inside "
            f"was written by that agent or its code.\n" + fenced(text, mark))


def turn_prompt(task_prompt: str, role: Role, episode: Episode, schedule: Schedule) -> str:
    """The user message opening `role`'s turn (see the module docstring)."""
    parts = [task_prompt]
    for upstream in role.sees:
        if upstream in episode.outputs:
            parts.append(quoted_output(f"Output of the {upstream}", episode.outputs[upstream]))
    loop = schedule.sent_back.get(role.name)
    if loop is not None:
        used = schedule.rounds[loop]
        if role.name in episode.outputs:
            parts.append(quoted_output("Your previous turn", episode.outputs[role.name]))
        if loop.sender not in role.sees and loop.sender in episode.outputs:
            parts.append(quoted_output(f"Output of the {loop.sender}", episode.outputs[loop.sender]))
        parts.append(f"## Sent back\nThe {loop.sender} sent the work back to you (round {used} of at most "
                     f"{loop.max_rounds}); its output above says why. Do your part again.")
    return "\n\n".join(parts)


def coach_request(team: Team, ep: Episode, role: Role, text: str, results: list[ExecResult], checks: dict,
                  limits: EpisodeLimits, messages: list[dict], action_index: int, final: bool,
                  evidence: dict) -> CoachRequest:
    """The coach's view of one action, with every untrusted field clipped and the file list capped (`limits`)."""
    cut = lambda s: clip(s, limits.coach_field_chars)  # noqa: E731
    files = dict(sorted(ep.file_owners.items())[: limits.coach_max_files])
    return CoachRequest(
        env_id=team.name,
        role=role.name,
        role_duties=role.duties,
        task=ep.task.prompt,
        action=cut(text),
        context=cut(chat_as_text(messages)),
        tool_results=[{**r.to_dict(), "stdout": cut(r.stdout), "stderr": cut(r.stderr)} for r in results],
        files=files,
        files_omitted=len(ep.file_owners) - len(files),
        upstream={r: cut(ep.outputs[r]) for r in team.names if r in ep.outputs and r != role.name},
        ground_truth=ep.task.answer,
        checks=dict(checks),
        action_index=action_index,
        is_final_action=final,
        team=team.describe(),
        **sanitized(evidence),
    )


__all__ = ["Schedule", "chat_as_text", "coach_request", "quoted_output", "turn_prompt"]
