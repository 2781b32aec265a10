"""``tidings mail attachment MESSAGE_ID ATTACHMENT_ID -o FILE``: save one attachment.
``tidings mail send ACCOUNT_ID --to … --subject … --text …``: queue a message
(``send-message``; a running ``tidings worker`` sends it).

The bytes are decoded from the sealed raw MIME while they are written, so a large
attachment never sits whole in memory. The file is written next to its target and
renamed into place, so a failure leaves no partial file behind.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Annotated

import typer

from application import Result
from application.mail.get_attachment import open_attachment
from infrastructure.cli.commands import AsOption, JsonFlag, parse_user, report
from infrastructure.cli.runtime import CliError, is_embedded, opened_app

app = typer.Typer(name="mail", help="A message's content; sending mail.", no_args_is_help=True)


@app.command("attachment")
def attachment(
    message_id: Annotated[str, typer.Argument(metavar="MESSAGE_ID")],
    attachment_id: Annotated[str, typer.Argument(metavar="ATTACHMENT_ID")],
    as_user: AsOption,
    output: Annotated[
        Path, typer.Option("--output", "-o", metavar="FILE", help="Where to write the bytes.")
    ],
) -> None:
    """Write one attachment of a message (ids from `get-message`) to FILE."""
    user = parse_user(as_user)
    with opened_app(existing=True) as tidings:
        if is_embedded(tidings):
            tidings.projections.catch_up()
        opened = open_attachment(tidings.ctx, user, message_id, attachment_id)
        if isinstance(opened, Result):
            report(opened, False)
            return
        partial = output.with_name(f".{output.name}.part")
        size = 0
        try:
            with partial.open("wb") as f:
                for chunk in opened.chunks:
                    f.write(chunk)
                    size += len(chunk)
            os.replace(partial, output)
        except OSError as error:
            partial.unlink(missing_ok=True)
            raise CliError(f"cannot write {output}: {error.strerror or error}") from None
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
    typer.echo(f"{opened.filename}: {size} bytes written to {output}")


@app.command("send")
def send(  # noqa: PLR0917 - one parameter per command-line option
    account_id: Annotated[str, typer.Argument(metavar="ACCOUNT_ID")],
    as_user: AsOption,
    to: Annotated[list[str], typer.Option("--to", help="A recipient (repeat for more).")],
    subject: Annotated[str, typer.Option("--subject")],
    text: Annotated[str | None, typer.Option("--text", help="The plain-text body.")] = None,
    html: Annotated[str | None, typer.Option("--html", help="The HTML body.")] = None,
    cc: Annotated[list[str] | None, typer.Option("--cc")] = None,
    bcc: Annotated[list[str] | None, typer.Option("--bcc")] = None,
    in_reply_to: Annotated[
        str | None, typer.Option("--in-reply-to", help="The messageId answered.")
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option("--idempotency-key", help="Sending again with it sends nothing new."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Queue a message from ACCOUNT_ID (a running `tidings worker` sends it)."""
    user = parse_user(as_user)
    payload: dict[str, object] = {
        "accountId": account_id,
        "to": to,
        "cc": cc or [],
        "bcc": bcc or [],
        "subject": subject,
        "idempotencyKey": idempotency_key or str(uuid.uuid4()),
    }
    for key, value in (("text", text), ("html", html), ("inReplyTo", in_reply_to)):
        if value is not None:
            payload[key] = value
    with opened_app() as tidings:
        result = tidings.write("send-message", payload, user)
    report(result, as_json)
