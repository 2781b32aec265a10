"""The ``tidings`` entry point: wires the sub-apps and turns failures into one line.

Exit codes: 0 success; 1 a failed result or an environment problem (bad setting,
database unavailable, unreadable file); 2 a usage error; 130 interrupted.
Run as ``tidings …`` (console script) or ``python -m infrastructure.cli.main …``.
"""

from __future__ import annotations

import os
import sys
import tomllib
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from infrastructure.cli import commands, events, projections, retention, serve, tenants, worker
from infrastructure.cli import mail as mail_cli
from infrastructure.cli import webhooks as webhooks_cli
from infrastructure.cli.output import configure_logging, error_line
from infrastructure.cli.runtime import EXIT_FAILED, EXIT_USAGE, CliError
from infrastructure.devkit import demo

try:  # typer vendors click since 0.2x; before, it used the click package
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover
    from click import exceptions as click_errors  # type: ignore[no-redef, import-not-found, unused-ignore]

# click >= 8.2: no arguments on a group prints its help and exits 2.
NoArgsIsHelp = getattr(click_errors, "NoArgsIsHelpError", ())


def version() -> str:
    try:
        return metadata.version("tidings")
    except metadata.PackageNotFoundError:  # running from a source tree
        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        try:
            return str(tomllib.loads(pyproject.read_text())["project"]["version"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"tidings {version()}")
        raise typer.Exit()


def build() -> typer.Typer:
    app = typer.Typer(
        name="tidings",
        help="Event-sourced backend for multi-tenant apps: custom fields and inbound mail. "
        "Configured by TIDINGS_* environment variables (TIDINGS_DATABASE_URL, default "
        "sqlite:///./tidings.db).",
        no_args_is_help=True,
        rich_markup_mode="markdown",
        add_completion=False,
        pretty_exceptions_enable=False,
    )

    @app.callback()
    def root(
        show_version: Annotated[
            bool,
            typer.Option(
                "--version",
                callback=_print_version,
                is_eager=True,
                help="Print the version and exit.",
            ),
        ] = False,
    ) -> None:
        """tidings: custom fields and inbound mail on one event store."""

    commands.register(app)
    app.add_typer(projections.app)
    app.add_typer(events.app)
    app.command()(demo.demo)
    app.command()(worker.worker)
    app.command()(serve.serve)
    app.add_typer(worker.accounts_app)
    app.add_typer(tenants.app)
    app.add_typer(retention.app)
    app.add_typer(webhooks_cli.app)
    app.add_typer(mail_cli.app)
    return app


def run(argv: Sequence[str] | None = None) -> int:  # noqa: PLR0911
    """Run the command line; answer the exit code (never raises for expected failures)."""
    configure_logging()
    command = typer.main.get_command(build())
    try:
        code = command.main(args=argv, prog_name="tidings", standalone_mode=False)
    except NoArgsIsHelp as no_args:
        # typer's rich help is printed while the error is made; click's is its message.
        if message := no_args.format_message().strip():
            typer.echo(message)
        return EXIT_USAGE
    except click_errors.UsageError as usage:
        hint = f" (see '{usage.ctx.command_path} --help')" if usage.ctx else ""
        error_line(usage.format_message().rstrip(".") + hint)
        return EXIT_USAGE
    except click_errors.ClickException as failure:
        error_line(failure.format_message())
        return failure.exit_code
    except CliError as failure:
        error_line(str(failure))
        return failure.exit_code
    except typer.Abort:
        error_line("aborted")
        return 130
    except KeyboardInterrupt:
        error_line("interrupted")
        return 130
    except BrokenPipeError:
        # The reader went away (e.g. `tidings events export | head`): stop quietly, and
        # point stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    return code if isinstance(code, int) else 0


def main(argv: Sequence[str] | None = None) -> NoReturn:
    sys.exit(run(argv))


if __name__ == "__main__":
    main()
