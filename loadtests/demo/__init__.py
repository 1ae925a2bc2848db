"""`specflip demo`: closed-loop clients drive a low -> high -> low load against a running app, and a
report says per phase what it served and per replica which modes the policy chose (`drive`).

Needs no Locust, gevent or matplotlib; the CLI (`loadtests.commands`) imports `drive` inside its
`demo` subcommand only.
"""

__all__: list[str] = []
