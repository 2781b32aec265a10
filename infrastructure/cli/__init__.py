"""The ``tidings`` command line: typer commands, rich output, one-line errors.

``main.py`` wires the sub-apps; each command module stays small and only turns
arguments into calls on the app (or on the event store and projection runner).
"""
