"""``tidings write`` and ``tidings query``: call one handler as one user, print the answer."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from application import Result, User
from infrastructure.cli.output import describe_error, error_line, print_data
from infrastructure.cli.runtime import EXIT_FAILED, is_embedded, opened_app

AsOption = Annotated[
    str,
    typer.Option(
        "--as",
        metavar="USER.json",
        help='The caller: a JSON file {"id", "tenantId", "roles": [...]}, or that JSON inline.',
    ),
]
PayloadOption = Annotated[
    str,
    typer.Option(
        "--payload",
        "-p",
        metavar="JSON",
        help="The payload as JSON, or @file.json (@- reads stdin).",
    ),
]
JsonFlag = Annotated[
    bool,
    typer.Option("--json", help="Compact JSON on stdout (a failed result too), for scripts."),
]

_USER_KEYS = {"id", "tenantId", "tenant_id", "roles"}


def _read_source(reference: str, option: str) -> str:
    if reference == "-":
        return sys.stdin.read()
    try:
        return Path(reference).read_text(encoding="utf-8")
    except OSError as error:
        raise typer.BadParameter(
            f"cannot read {reference}: {error.strerror or error}", param_hint=option
        ) from None


def _json(text: str, option: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as error:
        raise typer.BadParameter(f"not valid JSON ({error})", param_hint=option) from None


def parse_user(value: str) -> User:
    text = value if value.lstrip().startswith("{") else _read_source(value, "'--as'")
    data = _json(text, "'--as'")

    def bad(reason: str) -> typer.BadParameter:
        return typer.BadParameter(reason, param_hint="'--as'")

    if not isinstance(data, dict):
        raise bad('expected {"id": ..., "tenantId": ..., "roles": [...]}')
    unknown = sorted(set(data) - _USER_KEYS)
    if unknown:
        raise bad(f"unknown keys {unknown}; expected id, tenantId, roles")
    user_id, tenant = data.get("id"), data.get("tenantId", data.get("tenant_id"))
    roles = data.get("roles", [])
    if not isinstance(user_id, str) or not user_id:
        raise bad('"id" must be a non-empty string')
    if not isinstance(tenant, str) or not tenant:
        raise bad('"tenantId" must be a non-empty string')
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        raise bad('"roles" must be a list of role names')
    return User(id=user_id, tenant_id=tenant, roles=frozenset(roles))


def parse_payload(value: str) -> Any:
    if value.startswith("@"):
        return _json(_read_source(value[1:], "'--payload'"), "'--payload'")
    return _json(value, "'--payload'")


def report(result: Result, as_json: bool) -> None:
    if result.error is None:
        print_data(result.data, as_json)
        return
    error = result.error
    if as_json:
        print_data(
            {
                "error": {
                    "code": error.code,
                    "status": error.status,
                    "message": error.message,
                    "details": error.details,
                }
            },
            True,
        )
    error_line(describe_error(error))
    raise typer.Exit(EXIT_FAILED)


def write(
    handler: Annotated[str, typer.Argument(metavar="HANDLER", help="e.g. define-tenant-field")],
    as_user: AsOption,
    payload: PayloadOption = "{}",
    as_json: JsonFlag = False,
) -> None:
    """Run a write handler as a user and print its result.

    A failed result prints one line on stderr (status, code, message, details) and exits 1.
    """
    user, body = parse_user(as_user), parse_payload(payload)
    with opened_app() as app:
        result = app.write(handler, body, user)
    report(result, as_json)


def query(
    handler: Annotated[str, typer.Argument(metavar="HANDLER", help="e.g. get-entity")],
    as_user: AsOption,
    payload: PayloadOption = "{}",
    as_json: JsonFlag = False,
) -> None:
    """Run a query as a user and print its answer.

    On SQLite (the embedded default) pending events are projected first, so the query
    sees every earlier write. On PostgreSQL the read models are kept current by
    `tidings projections run`; the query shows what that runner has applied so far.
    A failed result prints one line on stderr and exits 1.
    """
    user, body = parse_user(as_user), parse_payload(payload)
    with opened_app(existing=True) as app:
        if is_embedded(app):
            app.projections.catch_up()
        result = app.query(handler, body, user)
    report(result, as_json)


def register(app: typer.Typer) -> None:
    app.command()(write)
    app.command()(query)
