"""``POST /v1/uploads?accountId=…&filename=…``: the request's body, as it arrives, into a
sealed blob of the account (``application.mail.outbound.uploads``); its ``uploadId``
names it in ``send-message``'s attachments. The body's ``Content-Type`` is the file's.

Bounds: a declared ``Content-Length`` past ``max_send_bytes`` is 413 before a byte is
read, and so is a body that grows past it (the partial blob is removed); the whole body
within ``upload_timeout`` (408: a slow drip is cut at that deadline, whatever its pace);
at most ``uploads_per_tenant`` at once (429), stored in a pool of ``upload_threads``.
Chunks are pulled one at a time from the event loop by the storing thread, so no more
than one chunk is held in memory between the socket and the sealed file."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import anyio
import anyio.from_thread
import anyio.to_thread
import orjson
from fastapi import FastAPI, Request
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from application.app import App
from application.mail.outbound.uploads import UploadInterrupted, store_upload
from application.result import Result
from application.users import User
from infrastructure.http import problems
from infrastructure.http.door import Door, Refused


def upload_routes(api: FastAPI, app: App, door: Door) -> None:
    @api.post("/v1/uploads", include_in_schema=False)
    async def upload(request: Request) -> Response:
        try:
            user = await door.caller(request)
            _declared_size(request, app.ctx.policy.max_send_bytes)
            with door.upload_slot(user):
                result = await _store(request, app, door, user)
        except Refused as refused:
            return refused.response
        if result.error is not None:
            return problems.problem(result.error)
        return Response(orjson.dumps(result.data), 200, media_type="application/json")


def _declared_size(request: Request, limit: int) -> None:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise Refused(
            problems.fail(
                "upload_too_large",
                413,
                f"an upload is at most {limit} bytes (the largest message that may be sent)",
                limitBytes=limit,
            )
        )


async def _store(request: Request, app: App, door: Door, user: User) -> Result:
    params = request.query_params
    content_type = request.headers.get("content-type", "application/octet-stream")
    deadline = anyio.current_time() + door.settings.upload_timeout
    stream: AsyncIterator[bytes] = request.stream().__aiter__()

    async def next_chunk() -> bytes | None:
        remaining = deadline - anyio.current_time()
        try:
            with anyio.fail_after(max(remaining, 0.0)):
                return await stream.__anext__()
        except StopAsyncIteration:
            return None
        except TimeoutError:
            raise UploadInterrupted(
                "request_timeout", 408, "the upload took too long to arrive"
            ) from None
        except ClientDisconnect:
            raise UploadInterrupted("client_disconnected", 400, "the upload ended early") from None

    def chunks() -> Iterator[bytes]:
        while (chunk := anyio.from_thread.run(next_chunk)) is not None:
            if chunk:
                yield chunk

    def run() -> Result:
        return store_upload(
            app.ctx,
            user,
            account_id=params.get("accountId", ""),
            filename=params.get("filename", ""),
            content_type=content_type.split(";", 1)[0].strip(),
            chunks=chunks(),
        )

    return await anyio.to_thread.run_sync(run, limiter=door.upload_pool)
