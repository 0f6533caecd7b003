"""The review page's HTML (Jinja2, autoescaped: every string from a transcript renders as text).

The pages carry no script at all (filters are GET forms, verdicts POST forms, prompts <details>), so
the Content-Security-Policy can forbid scripts outright as a second line behind the escaping.
"""
from __future__ import annotations

import jinja2

BASE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }} · mappa review</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1b1f24;background:#f6f7f9}
header{background:#1f2937;color:#fff;padding:8px 16px;display:flex;gap:18px;align-items:baseline}
header a{color:#cbd5e1;text-decoration:none} header b{font-size:16px}
main{padding:12px 16px} table{border-collapse:collapse;width:100%;background:#fff}
td,th{border-bottom:1px solid #e5e7eb;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600} .num{text-align:right;font-variant-numeric:tabular-nums}
pre{white-space:pre-wrap;word-break:break-word;background:#f3f4f6;padding:6px;margin:4px 0;
max-height:28em;overflow:auto}
.turn{background:#fff;border:1px solid #e5e7eb;border-radius:6px;margin:10px 0;padding:8px 12px}
.tag{display:inline-block;border-radius:4px;padding:0 5px;margin-right:4px;font-size:12px;background:#e5e7eb}
.bad{background:#fde2e1;color:#8a1c1c} .good{background:#dcf5e3;color:#14532d} .warn{background:#fef3c7;color:#7c4a03}
form.filters{display:flex;flex-wrap:wrap;gap:8px;align-items:end;margin-bottom:10px}
form.filters label{display:flex;flex-direction:column;font-size:12px} .muted{color:#6b7280}
.ro{background:#fef3c7;padding:6px 16px} .verdict{border-top:1px dashed #d1d5db;margin-top:6px;padding-top:6px}
.plots{display:flex;flex-wrap:wrap;gap:16px} .plot{background:#fff;border:1px solid #e5e7eb;padding:8px}
</style></head><body>
<header><b>mappa review</b><a href="/">episodes</a><a href="/queue">queue</a><a href="/plots">plots</a>
<span class="muted">{{ summary }}</span></header>
{% if read_only %}<div class="ro" id="read-only">Read-only: {{ db }} cannot be written, so verdicts are shown but
 not taken.</div>{% endif %}
<main>{% block main %}{% endblock %}</main></body></html>
"""

LIST = """{% extends "base" %}{% block main %}
<form class="filters" method="get" action="/">
 <label>env<select name="env"><option value="">any</option>{% for v in envs %}
  <option{% if v == f.env %} selected{% endif %}>{{ v }}</option>{% endfor %}</select></label>
 <label>role<select name="role"><option value="">any</option>{% for v in roles %}
  <option{% if v == f.role %} selected{% endif %}>{{ v }}</option>{% endfor %}</select></label>
 <label>step<select name="step"><option value="">any</option>{% for v in steps %}
  <option{% if v|string == f.step %} selected{% endif %}>{{ v }}</option>{% endfor %}</select></label>
 <label>outcome<select name="outcome">{% for v in ["", "correct", "wrong"] %}
  <option value="{{ v }}"{% if v == f.outcome %} selected{% endif %}>{{ v or "any" }}</option>{% endfor %}
 </select></label>
 <label>coach score ≥<input name="min" size="3" value="{{ f.min }}"></label>
 <label>coach score ≤<input name="max" size="3" value="{{ f.max }}"></label>
 <label>disagreements<select name="disagree">{% for v in ["", "1"] + kinds %}
  <option value="{{ v }}"{% if v == f.disagree %} selected{% endif %}>{{ {"": "–", "1": "any"}.get(v, v) }}</option>
  {% endfor %}</select></label>
 <button type="submit" id="apply">filter</button>
</form>
<p id="count">{{ total }} of {{ all }} episodes{% if pages > 1 %} · page {{ page }} of {{ pages }}{% endif %}</p>
<table id="episodes"><tr><th>#</th><th>env</th><th>set</th><th>step</th><th>task</th><th>roles</th>
<th class="num">actions</th><th class="num">mean coach</th><th>outcome</th><th class="num">disagree</th>
<th class="num">reviewed</th></tr>
{% for e in rows %}<tr><td><a href="/episode/{{ e.id }}">{{ e.id }}</a></td><td>{{ e.env_id }}</td><td>{{ e.set }}</td>
<td>{{ e.step if e.step is not none else "" }}</td><td title="{{ e.task_id }}">{% if e.fault %}<span class="tag"
 title="known culprit: {{ e.faulty_role or 'none' }}">{{ e.fault }}</span>{% endif %}{{ e.task|truncate(90) }}</td>
<td>{{ e.roles }}</td><td class="num">{{ e.n_actions }}</td>
<td class="num">{{ "%.1f"|format(e.mean) if e.mean is not none else "–" }}</td>
<td>{% if e.correct %}<span class="tag good">correct</span>{% elif e.correct is sameas false %}<span
 class="tag bad">wrong</span>{% endif %}</td>
<td class="num">{{ e.disagreements or "" }}</td><td class="num">{{ e.reviewed or "" }}</td></tr>{% endfor %}
</table>
<p>{% if page > 1 %}<a href="{{ link(page - 1) }}">← previous</a>{% endif %}
{% if page < pages %}<a href="{{ link(page + 1) }}" id="next">next →</a>{% endif %}</p>
{% endblock %}"""

EPISODE = """{% extends "base" %}{% block main %}
<h2>Episode {{ e.id }} · {{ e.env_id }} · {{ e.task_id }}</h2>
<p class="muted">{{ e.source }}:{{ e.line }}{% if e.set %} · set {{ e.set }}{% endif %}{% if e.step is not none %}
 · step {{ e.step }}{% endif %}{% if e.seed is not none %} · seed {{ e.seed }}{% endif %}{% if e.fault %}
 · fault <b id="fault">{{ e.fault }}</b> (known culprit: {{ e.faulty_role or "none" }}){% endif %} · outcome:
{% if e.correct %}<span class="tag good">correct</span>{% elif e.correct is sameas false %}<span class="tag bad">wrong
</span>{% else %}–{% endif %}{% if e.outcome_score is not none %} score {{ e.outcome_score }}{% endif %}</p>
<details><summary>task</summary><pre>{{ e.task }}</pre>
{% if e.ground_truth is not none %}<p>ground truth: <code>{{ e.ground_truth }}</code></p>{% endif %}</details>
{% if not e.actions %}<p>This file records the outcome only (a training run's episode log).</p>{% endif %}
{% for a in e.actions %}{% set k = loop.index0 %}
<section class="turn" id="a{{ k }}"><h3>{{ k }} · {{ a.role }}{% if a.index %} (action {{ a.index + 1 }} of its turn)
{% endif %}</h3>
{% if a.prompt %}<details><summary>prompt as the agent saw it</summary><pre>{{ a.prompt }}</pre></details>{% endif %}
<div>action:</div><pre class="action">{{ a.text }}</pre>
{% for r in a.tool_results %}<div>sandbox output {{ loop.index }}{% if r.ok is sameas false %}
 <span class="tag bad">failed</span>{% endif %}{% if r.timed_out %} <span class="tag bad">timed out</span>{% endif %}:
</div><pre>{{ r.stdout }}{% if r.stderr %}
--- stderr ---
{{ r.stderr }}{% endif %}{% if r.error %}
--- error ---
{{ r.error }}{% endif %}</pre>{% endfor %}
<p>coach: <b class="score">{{ a.coach_score if a.coach_score is not none else "unscored" }}</b>
{% for d in a.disagreements %}<span class="tag warn">disagrees: {{ d }}</span>{% endfor %}
· reward trained on: {{ a.reward if a.reward is not none else "–" }}
{% if a.share is not none %}· blame share: {{ "%.3f"|format(a.share) }}{% endif %}</p>
{% if a.faulty %}<span class="tag bad">the known fault is here</span>{% endif %}
{% if a.coaches %}<table class="coaches"><tr><th>coach</th><th class="num">score</th><th>rationale</th></tr>
{% for spec, v in a.coaches.items() %}<tr><td>{{ spec }}</td><td class="num">{{ v.score if v.score is not none
 else "unscored" }}</td><td><pre>{{ v.rationale }}</pre></td></tr>{% endfor %}</table>
{% elif a.rationale %}<pre class="rationale">{{ a.rationale }}</pre>{% endif %}
{% if a.checks %}<p class="muted">checks: {% for key, v in a.checks|dictsort %}{{ key }}={{ v }} {% endfor %}</p>
{% endif %}
<div class="verdict">{% for v in history.get(k, []) %}<div class="given">{% if loop.first %}<b>verdict</b>{% else %}
<span class="muted">earlier</span>{% endif %}: {% if v.human_score is not none %}score {{ v.human_score }}{% endif %}
{% if v.human_right is not none %}{{ "right" if v.human_right else "wrong" }}{% endif %} — {{ v.note }}
<span class="muted">({{ v.reviewer }}, {{ v.created_at }})</span></div>{% endfor %}
{% if not read_only %}<form method="post" action="/episode/{{ e.id }}/verdict" class="verdict-form">
<input type="hidden" name="action" value="{{ k }}">
<label>score <input name="score" size="3" placeholder="0-10"></label>
<label><input type="radio" name="right" value="1"> right</label>
<label><input type="radio" name="right" value="0"> wrong</label>
<label>note <input name="note" size="40"></label>
<label>by <input name="reviewer" size="10" value="{{ reviewer }}"></label>
<button type="submit">record verdict</button></form>{% endif %}</div>
</section>{% endfor %}
{% endblock %}"""

QUEUE = """{% extends "base" %}{% block main %}
<p>Actions without a verdict, those whose verdict would matter most first: disagreements, then scores
 near the middle or missing. {{ total }} in all; the first {{ rows|length }} shown.</p>
<table id="queue"><tr><th>episode</th><th>action</th><th>env</th><th>role</th><th class="num">coach</th>
<th>disagreements</th><th>outcome</th></tr>
{% for e, k, a in rows %}<tr><td><a href="/episode/{{ e.id }}#a{{ k }}">{{ e.id }}</a></td><td>{{ k }}</td>
<td>{{ e.env_id }}</td><td>{{ a.role }}</td>
<td class="num">{{ a.coach_score if a.coach_score is not none else "–" }}</td>
<td>{{ a.disagreements|join(", ") }}</td><td>{{ "correct" if e.correct else ("wrong" if e.correct is sameas false
 else "") }}</td></tr>{% endfor %}</table>
{% endblock %}"""

PLOTS = """{% extends "base" %}{% block main %}
<h3>Coach scores per role</h3><div class="plots">{% for role, bars, n in hists %}
<div class="plot"><div>{{ role }} <span class="muted">({{ n }} actions)</span></div>
<svg width="330" height="150" role="img">{% for b in bars %}
<rect x="{{ 20 + b.i * 27 }}" y="{{ 120 - b.h }}" width="24" height="{{ b.h }}" fill="#4f7cac">
<title>score {{ b.label }}:
 {{ b.n }}</title></rect><text x="{{ 32 + b.i * 27 }}" y="136" font-size="10" text-anchor="middle">{{ b.label }}</text>
{% endfor %}</svg></div>{% else %}<p>No scored actions.</p>{% endfor %}</div>
<h3>Run curves</h3>{% for name, series in curves %}<div class="plot"><div>{{ name }}</div>
<form method="get" action="/plots"><select name="metric">{% for m in metrics %}<option{% if m == metric %} selected
{% endif %}>{{ m }}</option>{% endfor %}</select> <button>show</button></form>
<svg width="640" height="220" role="img">{% for kind, points, color in series %}
<polyline fill="none" stroke="{{ color }}" stroke-width="2" points="{{ points }}"/>{% endfor %}
<text x="4" y="14" font-size="11">{{ metric }} ({% for kind, p, color in series %}<tspan fill="{{ color }}">{{ kind }}
</tspan> {% endfor %}) — {{ ranges[name] }}</text></svg></div>{% else %}<p>No metrics.jsonl under the served
 paths.</p>{% endfor %}
{% endblock %}"""

ENV = jinja2.Environment(
    loader=jinja2.DictLoader({"base": BASE, "list": LIST, "episode": EPISODE, "queue": QUEUE, "plots": PLOTS}),
    autoescape=True, undefined=jinja2.StrictUndefined)
