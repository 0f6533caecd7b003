"""`mappa`, the command line: one module per subcommand, imported only when that subcommand runs.

A subcommand module exposes `configure(parser)` (its arguments) and `run(args) -> int` (the exit
status). `mappa_cli.main.COMMANDS` maps each name to its module; `mappa_cli.errors` turns the errors a
user can fix into one line. Importing this package imports nothing heavy.
"""
