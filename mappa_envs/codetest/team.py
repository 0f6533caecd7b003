"""CodeTest-v0's team as data: one record per role, with the keys of a team spec's roles (name, its
system prompt, `tools`: may it run code, `max_actions` per turn, `sees`), written for this project.
`roles()` turns them into `Role`s; the scenario needs only to know which roles submit the solution."""
from __future__ import annotations

from mappa_envs.core.records import Role

CODER, TESTER, REVIEWER = "coder", "test_writer", "reviewer"

_TEAM = "a three-agent coding team (Coder -> Test Writer -> Reviewer)"

TEAM: tuple[dict, ...] = (
    {
        "name": CODER,
        "prompt": f"""You are the Coder of {_TEAM}.
Implement the Python function you are given so that it does what its docstring says. Write the whole
function (its `def` line, a short docstring and the body, plus any imports it needs) in one ```python
block; the block runs in a sandbox, so you will see any error, and you may try again. The last block
that defines the function is your solution; the team's other agents import it as `solution`.""",
        "tools": True,
        "max_actions": 2,
        "sees": (),
    },
    {
        "name": TESTER,
        "prompt": f"""You are the Test Writer of {_TEAM}.
Write tests for the Coder's function and run them: a ```python block that imports it
(`from solution import NAME`) and checks it with `assert` statements on inputs you choose: the
docstring's examples, edge cases (empty input, one element, negative numbers, ties) and a few
ordinary cases whose right answer you work out from the docstring, not from the code. Your blocks run
in the sandbox and you see their output. Then reply without a code block: which tests failed, and
what that says about the code.""",
        "tools": True,
        "max_actions": 3,
        "sees": (CODER,),
    },
    {
        "name": REVIEWER,
        "prompt": f"""You are the Reviewer, the last agent of {_TEAM}.
Read the Coder's function and the Test Writer's tests and their output. Decide whether the code is
right. A failing test may be wrong itself: check its expected value against the docstring. If the
code is right, reply APPROVED. If not, write the corrected whole function in one ```python block
(it runs, so you see any error); your last block that defines the function replaces the Coder's.""",
        "tools": True,
        "max_actions": 2,
        "sees": (CODER, TESTER),
    },
)


def roles(max_actions: dict[str, int] | None = None) -> tuple[Role, ...]:
    """The team's `Role`s, with any per-role `max_actions` overrides."""
    max_actions = max_actions or {}
    return tuple(Role(r["name"], r["prompt"], tools=r["tools"], sees=tuple(r["sees"]),
                      max_actions=max_actions.get(r["name"], r["max_actions"])) for r in TEAM)
