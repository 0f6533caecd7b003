"""The review server: a Starlette app over one loaded `Index` and one `VerdictStore`.

Routes: `/` (episodes, filtered), `/episode/{id}` (every turn, and a verdict form per action),
`POST /episode/{id}/verdict`, `/queue` (actions to review, most useful first), `/plots`. The browser
only ever names an episode by its number in the index: no route takes a path, so no request can
reach a file outside the served transcripts. Every request must name this server as its Host (no DNS
rebinding), come from no other origin, and, when the server was given a token, carry it.
"""
from __future__ import annotations

import asyncio
import hmac
import math
from collections import defaultdict
from urllib.parse import parse_qs, urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from mappa_train.review.templates import ENV
from mappa_train.review.transcripts import DISAGREEMENTS, Episode, Index, priority
from mappa_train.review.verdicts import DatabaseBusy, Verdict, VerdictError, VerdictStore

PAGE_SIZE = 100
QUEUE_SIZE = 200
MAX_FORM_BYTES = 16_384
BODY_S = 10.0  # a verdict form is small: one that trickles in longer is a stalled client
FORM = "application/x-www-form-urlencoded"
TOKEN_COOKIE = "mappa_review_token"
CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")
COLORS = {"train": "#4f7cac", "eval": "#c2410c"}


def build_app(index: Index, store: VerdictStore, hosts: list[str] | None, token: str | None = None,
              reviewer: str = "reviewer") -> Starlette:
    """The app serving `index`. `hosts`: the Host names it answers to ("127.0.0.1:8765", ...); None (only
    with a token) takes any, for a server bound to every address."""
    if hosts is None and token is None:
        raise ValueError("a server that answers to any Host name needs a token")
    by_source = defaultdict(list)  # verdict keys are per file: resolve each file's key once
    for e in index.episodes:
        by_source[e.source].append(e)
    keys = {src: store.key_of(src) for src in by_source}
    summary = (f"{len(index.episodes)} episodes, {sum(len(e.actions) for e in index.episodes)} actions "
               f"from {len(by_source)} files")

    def page(name: str, **context) -> HTMLResponse:
        html = ENV.get_template(name).render(summary=summary, read_only=not store.writable, db=str(store.path),
                                             **context)
        return HTMLResponse(html)

    def reviewed_counts() -> dict[tuple[str, int], int]:
        counts: dict[tuple[str, int], int] = defaultdict(int)
        for source, line, _ in store.reviewed():
            counts[(source, line)] += 1
        return counts

    def episodes(request: Request) -> Response:
        f = _filters(request)
        matched = [e for e in index.episodes if _matches(e, f)]
        pages = max(1, math.ceil(len(matched) / PAGE_SIZE))
        number = min(max(1, _int(request.query_params.get("page")) or 1), pages)
        counts = reviewed_counts()
        rows = [_row(e, counts.get((keys[e.source], e.line), 0))
                for e in matched[(number - 1) * PAGE_SIZE: number * PAGE_SIZE]]
        query = {k: v for k, v in f.items() if v}

        def link(n: int) -> str:
            return "/?" + urlencode({**query, "page": n})

        return page("list", title="episodes", f=f, kinds=list(DISAGREEMENTS), envs=index.envs(), roles=index.roles(),
                    steps=index.steps(),
                    rows=rows, total=len(matched), all=len(index.episodes), page=number, pages=pages, link=link)

    def episode(request: Request) -> Response:
        e = _episode(index, request)
        return page("episode", title=f"episode {e.id}", e=e, history=store.history(e.source, e.line),
                    reviewer=reviewer)

    async def verdict(request: Request) -> Response:
        e = _episode(index, request)
        if not store.writable:
            return PlainTextResponse(f"read-only: {store.path} cannot be written", status_code=403)
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != FORM:
            return PlainTextResponse(f"a verdict is a form post ({FORM}), got {kind or 'no content type'!r}",
                                     status_code=415)
        try:
            body = await asyncio.wait_for(_form_body(request), BODY_S)
        except asyncio.TimeoutError:
            return PlainTextResponse(f"the form did not arrive within {BODY_S:g} s", status_code=408)
        if body is None:
            return PlainTextResponse(f"a verdict form holds at most {MAX_FORM_BYTES} bytes", status_code=413)
        form = {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}
        k = _int(form.get("action"))
        if k is None or not 0 <= k < len(e.actions):
            return PlainTextResponse(f"episode {e.id} has no action {form.get('action', '')[:20]!r}", status_code=400)
        try:
            v = Verdict(human_score=_score(form.get("score", "")),
                        human_right={"1": True, "0": False}.get(form.get("right", "")),
                        note=form.get("note", ""), reviewer=form.get("reviewer", ""))
            await run_in_threadpool(store.add, e.source, e.line, k, v, about(e, k))  # the loop serves on meanwhile
        except VerdictError as err:
            return PlainTextResponse(str(err), status_code=400)
        return RedirectResponse(f"/episode/{e.id}#a{k}", status_code=303)

    def queue(request: Request) -> Response:
        done = store.reviewed()
        todo = [(e, k, a) for e in index.episodes for k, a in enumerate(e.actions)
                if (keys[e.source], e.line, k) not in done]
        todo.sort(key=lambda t: -priority(t[2]))
        return page("queue", title="queue", rows=todo[:QUEUE_SIZE], total=len(todo))

    def plots(request: Request) -> Response:
        metrics = sorted({k for rows in index.curves.values() for r in rows for k, v in r.items()
                          if k not in ("step", "kind") and isinstance(v, (int, float)) and not isinstance(v, bool)})
        metric = request.query_params.get("metric") or next((m for m in metrics if "accuracy" in m), None) \
            or (metrics[0] if metrics else "")
        curves, ranges = [], {}
        for name, rows in index.curves.items():
            series, ranges[name] = _curve(rows, metric)
            curves.append((name, series))
        return page("plots", title="plots", hists=_histograms(index), curves=curves, metrics=metrics, metric=metric,
                    ranges=ranges)

    def busy(request: Request, exc: DatabaseBusy) -> Response:
        return PlainTextResponse(str(exc), status_code=503, headers={"Retry-After": "2"})

    app = Starlette(routes=[Route("/", episodes), Route("/episode/{id:int}", episode),
                            Route("/episode/{id:int}/verdict", verdict, methods=["POST"]),
                            Route("/queue", queue), Route("/plots", plots)],
                    exception_handlers={DatabaseBusy: busy})
    return _Guard(app, hosts, token)


def about(e: Episode, k: int) -> dict:
    """What a verdict stores beside the human's judgement: ids, the coach's score and the coach's view."""
    a = e.actions[k]
    upstream = {}
    for b in e.actions[:k]:  # each earlier role's last output, as the env passes it on
        if b.role != a.role:
            upstream[b.role] = b.text
    request = {"env_id": e.env_id, "role": a.role, "task": e.task, "action": a.text, "context": a.prompt,
               "tool_results": a.tool_results, "upstream": upstream, "ground_truth": e.ground_truth,
               "checks": a.checks, "action_index": a.index, "is_final_action": k == len(e.actions) - 1}
    return {"env_id": e.env_id, "task_id": e.task_id, "role": a.role, "seed": e.seed, "sample": e.sample,
            "coach_score": a.coach_score, "coach_rationale": a.rationale, "request": request}


class _Guard:
    """ASGI middleware: Host must be ours, Origin (if any) ours, unsafe methods must prove their origin,
    the token (if any) must match; every response forbids scripts, framing and sniffing."""

    def __init__(self, app, hosts: list[str] | None, token: str | None):
        self.app, self.hosts, self.token = app, None if hosts is None else {h.lower() for h in hosts}, token

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request = Request(scope)
        refusal = self._refusal(request)
        if refusal is not None:
            return await PlainTextResponse(refusal, status_code=403, headers=_HEADERS)(scope, receive, send)
        set_cookie = self.token is not None and request.query_params.get("token") == self.token

        async def with_headers(message):
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.lower().encode(), v.encode()) for k, v in _HEADERS.items()]
                if set_cookie:
                    headers.append((b"set-cookie", f"{TOKEN_COOKIE}={self.token}; HttpOnly; SameSite=Strict; "
                                                   "Path=/".encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)

    def _refusal(self, request: Request) -> str | None:
        host = request.headers.get("host", "").lower()
        if self.hosts is not None and host not in self.hosts:  # a rebound DNS name reaching a loopback server
            return f"refused: this server answers to {', '.join(sorted(self.hosts))}, not Host {host!r}"
        own = f"http://{host}"
        origin = request.headers.get("origin")
        if origin is not None and origin.lower() != own:
            return f"refused: requests from another origin ({origin}) are not served"
        if request.headers.get("sec-fetch-site") not in (None, "same-origin", "none"):
            return "refused: cross-site request"
        if request.method not in ("GET", "HEAD"):
            referer = request.headers.get("referer", "").lower()
            if origin is None and not referer.startswith(own + "/"):
                return "refused: a form post must come from this page (no Origin or Referer of this server)"
        if self.token is not None:
            given = request.query_params.get("token") or request.cookies.get(TOKEN_COOKIE) or ""
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                return "refused: this server needs its token (open the address it printed, with ?token=...)"
        return None


_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
            "Referrer-Policy": "same-origin", "Cache-Control": "no-store"}


def _episode(index: Index, request: Request) -> Episode:
    from starlette.exceptions import HTTPException

    eid = request.path_params["id"]
    if not 0 <= eid < len(index.episodes):
        raise HTTPException(404, f"no episode {eid}")
    return index.episodes[eid]


async def _form_body(request: Request) -> bytes | None:
    """The request's body, read no further than a form can be (None: it is longer)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return None
    return body


def _filters(request: Request) -> dict:
    q = request.query_params
    return {"env": q.get("env", ""), "role": q.get("role", ""), "step": q.get("step", ""),
            "outcome": q.get("outcome", ""), "min": q.get("min", ""), "max": q.get("max", ""),
            "disagree": q.get("disagree", "")}


def _matches(e: Episode, f: dict) -> bool:
    if f["env"] and e.env_id != f["env"]:
        return False
    if f["step"] and str(e.step) != f["step"]:
        return False
    if f["outcome"] == "correct" and e.correct is not True or f["outcome"] == "wrong" and e.correct is not False:
        return False
    actions = [a for a in e.actions if not f["role"] or a.role == f["role"]]
    if f["role"] and not actions:
        return False
    lo, hi = _score(f["min"], strict=False), _score(f["max"], strict=False)
    if lo is not None or hi is not None:
        actions = [a for a in actions if a.coach_score is not None and (lo is None or a.coach_score >= lo)
                   and (hi is None or a.coach_score <= hi)]
        if not actions:
            return False
    kind = f["disagree"]  # "1": any kind; else one of DISAGREEMENTS
    return not kind or any(kind in a.disagreements if kind in DISAGREEMENTS else a.disagreements for a in actions)


def _row(e: Episode, reviewed: int) -> dict:
    scores = e.scores()
    return {"id": e.id, "env_id": e.env_id, "set": e.set, "step": e.step, "task": e.task or e.task_id,
            "task_id": e.task_id, "roles": ", ".join(sorted(e.roles)), "n_actions": len(e.actions),
            "mean": sum(scores) / len(scores) if scores else None, "correct": e.correct,
            "disagreements": e.disagreements, "reviewed": reviewed, "fault": e.fault, "faulty_role": e.faulty_role}


def _histograms(index: Index) -> list[tuple[str, list[dict], int]]:
    by_role: dict[str, list[int]] = defaultdict(lambda: [0] * 11)
    for e in index.episodes:
        for a in e.actions:
            if a.coach_score is not None and math.isfinite(a.coach_score):
                by_role[a.role][min(10, max(0, round(a.coach_score)))] += 1
    out = []
    for role, counts in sorted(by_role.items()):
        top = max(counts) or 1
        out.append((role, [{"i": i, "n": n, "h": round(100 * n / top), "label": i} for i, n in enumerate(counts)],
                    sum(counts)))
    return out


def _curve(rows: list[dict], metric: str) -> tuple[list[tuple[str, str, str]], str]:
    """SVG polylines (kind, points, colour) of `metric` over step, one per row kind, on shared axes."""
    data = {kind: [(r["step"], r[metric]) for r in rows if r.get("kind") == kind and _finite(r.get(metric))
                   and isinstance(r.get("step"), (int, float))] for kind in sorted({str(r.get("kind")) for r in rows})}
    points = [p for ps in data.values() for p in ps]
    if not points:
        return [], "no values"
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y0, y1 = min(p[1] for p in points), max(p[1] for p in points)
    sx = lambda x: 30 + 590 * (x - x0) / ((x1 - x0) or 1)  # noqa: E731
    sy = lambda y: 200 - 170 * (y - y0) / ((y1 - y0) or 1)  # noqa: E731
    series = [(kind, " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in ps), COLORS.get(kind, "#6b7280"))
              for kind, ps in data.items() if ps]
    return series, f"steps {x0}–{x1}, values {y0:.3g}–{y1:.3g}"


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _score(text: str, strict: bool = True) -> float | None:
    """A 0-10 score typed into a form; empty is None. `strict`: anything else is a VerdictError."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        if strict:
            raise VerdictError(f"a score must be a number from 0 to 10, got {text[:20]!r}")
        return None
    return value + 0.0  # -0 is 0


def _int(text) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None
