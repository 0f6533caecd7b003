"""Score many recorded requests at once through `Coach.ascore`, with bounded concurrency.

    scores = score_many(coach, requests, concurrency=16)   # same order as requests

Envs call `score` one action at a time from their worker threads. Offline work — re-scoring a run's
transcripts with another coach, measuring a coach's blame precision — has all the requests up
front, so it gathers `ascore` calls on one event loop instead of holding a thread per request.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from mappa_envs.coach.types import Coach, CoachRequest, CoachScore
from mappa_envs.errors import InputError


async def ascore_many(coach: Coach, requests: Sequence[CoachRequest], concurrency: int = 16,
                      on_score: Callable[[int, CoachScore], None] | None = None) -> list[CoachScore]:
    """`coach.ascore` every request, at most `concurrency` in flight; `on_score(i, score)` as each lands."""
    if concurrency < 1:
        raise InputError(f"concurrency must be >= 1, got {concurrency}")
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int, request: CoachRequest) -> CoachScore:
        async with gate:
            score = await coach.ascore(request)
        if on_score is not None:
            on_score(i, score)
        return score

    return list(await asyncio.gather(*(one(i, r) for i, r in enumerate(requests))))


def score_many(coach: Coach, requests: Sequence[CoachRequest], concurrency: int = 16,
               on_score: Callable[[int, CoachScore], None] | None = None) -> list[CoachScore]:
    """The blocking form of `ascore_many`, for code that is not already in an event loop."""
    return asyncio.run(ascore_many(coach, requests, concurrency, on_score))
