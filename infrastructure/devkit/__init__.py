"""For development and demonstration only, never a product path: the ``tidings demo``
walk-through (``demo*.py``) and the private servers it, the tests and the benchmarks
run on loopback (Dovecot: ``dovecot.py`` and its ``dovecot.conf.tmpl``; process
groups and free ports: ``processes.py``). Only the CLI's ``demo`` command imports it
(an import-linter contract keeps it so)."""
