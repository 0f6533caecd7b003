"""`mappa review`: a local web page over a run's transcripts, human verdicts in SQLite, verdicts as data.

`transcripts` reads the episodes, `verdicts` stores what people say about their actions, `app` serves
both, `labels` turns verdicts into a `datasets` dataset and measures coaches against them. Needs the
`review` extra (starlette, uvicorn, jinja2) for the server; nothing here is imported by `mappa_envs`.
"""
