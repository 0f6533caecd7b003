"""CachedCoach: a persistent SQLite cache in front of any coach.

The key is a SHA-256 of the wrapped coach's identity (for `LLMCoach`: model, prompt template
version, reply-format version, sampling settings) and the full request. Re-runs and evaluations
replay the exact verdicts at zero cost, which also makes seeded episodes reproducible with an LLM
coach (given the same actions, the same rewards).

Only `ok=True` verdicts are stored: a failure is retried on the next run, never replayed. A hit
comes back with `cached=True`, `attempts=0` and zero tokens and cost (nothing was spent now).
Safe to share between threads (one connection behind a lock) and between processes (WAL mode).
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path

from mappa_envs.coach.types import Coach, CoachRequest, CoachScore
from mappa_envs.errors import InputError


class CachedCoach:
    """Wraps `coach`; `hits` and `misses` count lookups since construction."""

    name = "cached"

    def __init__(self, coach: Coach, path: str | Path, namespace: str | None = None):
        """namespace: the cache identity for a coach without `cache_identity(request)`; it must change
        whenever that coach's settings change, or stale verdicts are replayed."""
        if namespace is None and not hasattr(coach, "cache_identity"):
            raise InputError(f"CachedCoach: {type(coach).__name__} has no cache_identity(request); pass "
                             "namespace='<name and settings of the coach>' (it is part of the cache key)")
        self.coach = coach
        self.namespace = namespace
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.hits = self.misses = 0
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=60, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS verdicts "
                         "(key TEXT PRIMARY KEY, verdict TEXT NOT NULL, created REAL NOT NULL)")

    def key(self, request: CoachRequest) -> str:
        identity = self.namespace if self.namespace is not None else self.coach.cache_identity(request)
        blob = json.dumps({"coach": type(self.coach).__name__, "identity": identity, "request": request.to_dict()},
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()

    def score(self, request: CoachRequest) -> CoachScore:
        started, key = time.monotonic(), self.key(request)
        hit = self._get(key, started)
        if hit is not None:
            return hit
        verdict = self.coach.score(request)
        self._put(key, verdict)
        return verdict

    async def ascore(self, request: CoachRequest) -> CoachScore:
        started, key = time.monotonic(), self.key(request)
        hit = self._get(key, started)
        if hit is not None:
            return hit
        verdict = await self.coach.ascore(request)
        self._put(key, verdict)
        return verdict

    def stats(self) -> dict:
        with self._lock:
            entries = self._db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0]
            return {"hits": self.hits, "misses": self.misses, "entries": entries, "path": str(self.path)}

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> CachedCoach:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _get(self, key: str, started: float) -> CoachScore | None:
        with self._lock:
            row = self._db.execute("SELECT verdict FROM verdicts WHERE key = ?", (key,)).fetchone()
            if row is None:
                self.misses += 1
                return None
            self.hits += 1
        v = json.loads(row[0])
        return CoachScore(score=v["score"], rationale=v["rationale"], answer_correct=v["answer_correct"],
                          attempts=0, latency_s=time.monotonic() - started, cached=True)

    def _put(self, key: str, verdict: CoachScore) -> None:
        if not verdict.ok:
            return
        blob = json.dumps({"score": verdict.score, "rationale": verdict.rationale,
                           "answer_correct": verdict.answer_correct})
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?)", (key, blob, time.time()))
