"""Who created, changed or deleted each workspace file: the evidence DSBench's blame rests on.

After every action the workspace is listed and each entry's fingerprint compared with the last one seen:
(kind, size, mtime, inode, ctime, and the sha256 of the content for the contract files up to `HASH_MAX`
bytes). A cell can set an mtime back (`os.utime`) but not a ctime, and a rename-over changes the inode, so
a rewrite that keeps the size and the mtime is still a change. What changed is the acting role's:
`Episode.file_owners` (last writer), `Episode.file_history` (every change), and `removed_by` (who deleted
a file). The contract files (`TRACKED`) are looked up by name, so a workspace flooded past the listing's
entry cap can neither hide them nor make them read as deleted; any other path the truncated listing did
not reach keeps its last fingerprint (not looked at is not deleted).

A role that changes or deletes a contract file that its rightful owner wrote (a task file still the task's,
another role's deliverable written by that role) did damage: `track_files`
returns it, the env reports the check `others_files_intact=False` on that action, and a file it deleted is
owed by it (not by the role that wrote it) when the hand-off or the outcome finds it missing.
"""
from __future__ import annotations

from mappa_envs.core.pipeline import Episode
from mappa_envs.core.untrusted import one_line
from mappa_envs.core.workspace import WorkspaceFileError, inventory
from mappa_envs.dsbench import prompts

TASK_FILES = ("train.csv", "test.csv", "sample_submission.csv")
# contract file -> who it belongs to: the task, or the role whose deliverable it is
CONTRACT = {**{f: "task" for f in TASK_FILES}, **{f: "data_engineer" for f in prompts.ENGINEER_FILES},
            **{f: "modeler" for f in prompts.MODELER_FILES}, **{f: "analyst" for f in prompts.ANALYST_FILES}}
TRACKED = tuple(CONTRACT)
HASH_MAX = 256 << 10  # contract files up to this size are hashed after every action (larger: the fingerprint)


def track_files(episode: Episode, writer: str) -> list[dict]:
    """Attribute every change since the last look to `writer`; return the damage it did to others' contract
    files as [{"file", "owner" (before), "change"}]. A listing failure is noted in the state, not raised."""
    try:
        now = inventory(episode.session, include=TRACKED, hash_max=HASH_MAX)
    except WorkspaceFileError as e:
        episode.state["inventory_error"] = str(e)
        return []
    episode.state.pop("inventory_error", None)
    before: dict = episode.state["inventory"]
    removed_by: dict = episode.state.setdefault("removed_by", {})
    files, damage = dict(now.files), []

    def record(path: str, change: str) -> None:
        name = one_line(path)
        previous = episode.file_owners.get(name)
        if change != "created" and CONTRACT.get(path) == previous != writer:  # its rightful owner's, and not its own
            damage.append({"file": name, "owner": previous, "change": change})
        if change == "deleted":
            episode.file_owners.pop(name, None)
            removed_by[name] = writer
        else:
            episode.file_owners[name] = writer
            removed_by.pop(name, None)
        episode.file_history.setdefault(name, []).append({"role": writer, "change": change})

    for path in sorted(files):
        if path not in before:
            record(path, "created")
        elif files[path] != before[path]:
            record(path, "modified")
    for path in sorted(before.keys() - files.keys()):
        if now.known_absent(path):
            record(path, "deleted")
        else:  # the truncated listing did not reach it: as far as we know, unchanged
            files[path] = before[path]
    episode.state["inventory"] = files
    return damage


def owed_by(episode: Episode, file: str, owner: str) -> str:
    """Who answers for `file` missing: the role that deleted it, if not its own `owner`; else the owner."""
    return episode.state.get("removed_by", {}).get(file, owner)


__all__ = ["CONTRACT", "HASH_MAX", "TASK_FILES", "TRACKED", "owed_by", "track_files"]
