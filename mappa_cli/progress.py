"""Progress of a long job on stderr: episodes done / total, throughput, ETA, and coach failures.

On a terminal it is a tqdm bar; otherwise (a log file, CI, `--no-progress`) a plain line every
`every_s` seconds and one at the end. With `activity` (a callable saying what the policies are doing:
requests answered, tokens, requests in flight), a line comes every `every_s` seconds even while no
episode ends, so a slow model's first episode is not minutes of silence. A coach call that fails
is announced once when it first happens and summed up at the end ("coach: 4/4 calls failed (last
error: ...)"), so a run whose coach is unreachable does not pass for a run with low scores.

With `actions` (a callable: how many actions the policies have answered so far), the ETA counts
actions, not episodes: episodes played side by side all end near the end, so an episode count says
"ETA ?" until then. The actions an episode takes are estimated from the finished ones, and before
the first ends from `actions_per_episode` (the team's roles: each acts at least once), so a slow
model's first minutes already show a moving ETA ("ETA ~4 min 10 s, 6 of ~24 actions").
"""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO


class Progress:
    def __init__(self, total: int, desc: str, bar: bool | None = None, every_s: float = 10.0,
                 stream: TextIO | None = None, activity: Callable[[], str] | None = None,
                 actions: Callable[[], int] | None = None, actions_per_episode: float = 1.0):
        """bar: True/False forces the tqdm bar on/off; None: on when `stream` is a terminal."""
        self.total, self.desc, self.every_s, self.activity = total, desc, every_s, activity
        self.actions, self.actions_per_episode = actions, max(actions_per_episode, 1.0)
        self._finished_actions = 0  # actions of the episodes done
        self.stream = stream or sys.stderr
        self.done = self.failed = self.coach_calls = self.coach_failures = 0
        self.last_error: str | None = None
        self.started = self._last_line = time.monotonic()
        self._bar = None
        if self.stream.isatty() if bar is None else bar:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=desc, unit="episode", file=self.stream, dynamic_ncols=True)
        self._stop = threading.Event()
        self._ticker = None
        if activity is not None:
            self._ticker = threading.Thread(target=self._tick, name="progress-ticker", daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        """Between episodes: a line (or the bar's postfix) every every_s seconds with the activity."""
        while not self._stop.wait(min(self.every_s, 1.0)):
            if time.monotonic() - self._last_line < self.every_s:
                continue
            bar = self._bar
            if bar is not None:
                bar.set_postfix_str("; ".join(filter(None, (self._action_eta(), self._activity_text()))))
                self._last_line = time.monotonic()
            else:
                self.say(self.line())

    def episode(self, record: dict) -> None:
        """One finished episode: its transcript record (`actions[i]["coach"]` holds each verdict)."""
        failures_before = self.coach_failures
        for action in record.get("actions", ()):
            verdict = action.get("coach")
            if verdict is None:
                continue
            self.coach_calls += 1
            if not verdict.get("ok", True):
                self.coach_failures += 1
                self.last_error = str(verdict.get("error"))[:200]
        self.done += 1
        self._finished_actions += len(record.get("actions", ()))
        self.failed += bool(record.get("error"))  # the episode raised; the driver went on without it
        if self.coach_failures and not failures_before:
            self.say(f"coach: a call failed ({self.last_error}); further failures are counted")
        if self._bar is not None:
            if self.coach_failures or self.failed:
                self._bar.set_postfix_str(self._failures())
            self._bar.update(1)
        elif self.done == self.total or time.monotonic() - self._last_line >= self.every_s:
            self.say(self.line())

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = self.total - self.done
        when = (f"done in {_duration(elapsed)}" if not left else self._action_eta()
                or (f"ETA {_duration(left / rate)}" if rate else "ETA ?"))
        failures = f" ({self._failures()})" if self.failed or self.coach_failures else ""
        doing = f"; {self._activity_text()}" if self.activity is not None else ""
        return f"{self.desc}: {self.done}/{self.total} episodes{failures}, {rate:.2f} episodes/s, {when}{doing}"

    def _action_eta(self) -> str | None:
        """"ETA ~T, A of ~N actions" from the actions answered so far; None before the first is answered."""
        answered = self._answered()
        if not answered or self.done >= self.total:
            return None
        per_episode = self._finished_actions / self.done if self.done else self.actions_per_episode
        expected = self._finished_actions + (self.total - self.done) * per_episode
        left = max(expected - answered, self.total - self.done)  # an unfinished episode has an action left
        eta = left * (time.monotonic() - self.started) / answered
        return f"ETA ~{_duration(eta)}, {answered} of ~{max(expected, answered + left):.0f} actions"

    def _answered(self) -> int:
        try:
            return int(self.actions()) if self.actions is not None else 0
        except Exception:  # a progress line must never stop the run
            return 0

    def _activity_text(self) -> str:
        try:
            return self.activity() if self.activity is not None else ""
        except Exception as e:  # a progress line must never stop the run
            return f"activity unknown ({type(e).__name__})"

    def _failures(self) -> str:
        parts = [f"{self.failed} failed"] if self.failed else []
        parts += [f"coach failed {self.coach_failures}/{self.coach_calls}"] if self.coach_failures else []
        return ", ".join(parts)

    def coach_summary(self) -> str | None:
        if not self.coach_failures:
            return None
        return f"coach: {self.coach_failures}/{self.coach_calls} calls failed (last error: {self.last_error})"

    def say(self, text: str) -> None:
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)
        self._last_line = time.monotonic()

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
            self._ticker = None
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        summary = self.coach_summary()
        if summary:
            self.say(summary)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds} s" if seconds < 120 else f"{seconds // 60} min {seconds % 60:02d} s"
