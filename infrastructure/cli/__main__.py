"""``python -m infrastructure.cli`` runs the ``tidings`` command line."""

from infrastructure.cli.main import main

main()
