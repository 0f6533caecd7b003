"""Measuring coaches on scripted episodes with known faults: `mappa blame` and `mappa coach-eval`.

`faults` (what an env registers: the faults its scripted team can inject), `blame` (does the coach
blame the faulty agent?), `card` (a coach's report card) and `metrics` (the card's metrics on plain
lists). Everything here runs on the envs and coaches alone; nothing in it trains.
"""
