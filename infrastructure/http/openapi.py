"""The OpenAPI 3.1 document, derived from the use cases' payload models.

Each use case's schema and the models it nests go under ``components/schemas`` with
the use case's name as prefix (``connect-mail-account.ImapSettings``), since models
in different use cases may share a class name.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from application.handlers import UseCase
from infrastructure.http import problems

PROBLEM = "Problem"


def document(writes: Mapping[str, UseCase], queries: Mapping[str, UseCase]) -> dict[str, Any]:
    schemas: dict[str, Any] = {PROBLEM: problems.SCHEMA}
    paths: dict[str, Any] = {}
    for kind, table in (("commands", writes), ("queries", queries)):
        for use_case in table.values():
            paths[f"/v1/{kind}/{use_case.name}"] = {"post": _operation(kind, use_case, schemas)}
    paths.update(_operational_paths())
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "tidings",
            "version": "1",
            "description": "Custom fields and inbound mail on one event store. Every "
            "command and query of the Python app layer, by name.",
        },
        "security": [{"apiKey": []}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "apiKey": {"type": "http", "scheme": "bearer", "description": "an API key"}
            },
        },
    }


def _operation(kind: str, use_case: UseCase, schemas: dict[str, Any]) -> dict[str, Any]:
    name = use_case.name
    schema = use_case.payload.model_json_schema(
        by_alias=True, ref_template=f"#/components/schemas/{name}.{{model}}"
    )
    for nested, definition in schema.pop("$defs", {}).items():
        schemas[f"{name}.{nested}"] = definition
    schemas[name] = schema
    module = inspect.getmodule(use_case.handle)
    summary = (module.__doc__ or name).strip().splitlines()[0] if module else name
    return {
        "operationId": f"{kind}.{name}",
        "summary": summary,
        "tags": [kind],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}},
        },
        "responses": {
            "200": {
                "description": "the use case's answer",
                "content": {"application/json": {"schema": {"type": "object"}}},
            },
            "default": _problem_response("the use case's error, or the API's"),
        },
    }


def _problem_response(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {problems.MEDIA_TYPE: {"schema": {"$ref": f"#/components/schemas/{PROBLEM}"}}},
    }


def _operational_paths() -> dict[str, Any]:
    def plain(summary: str, media: str = "application/json") -> dict[str, Any]:
        return {
            "get": {
                "operationId": summary.split(maxsplit=1)[0],
                "summary": summary,
                "security": [],
                "responses": {
                    "200": {"description": "ok", "content": {media: {"schema": {}}}},
                    "default": _problem_response("not ready, or an error"),
                },
            }
        }

    def int_param(name: str, description: str, maximum: int) -> dict[str, Any]:
        schema = {"type": "integer", "minimum": 0, "maximum": maximum}
        return {"name": name, "in": "query", "description": description, "schema": schema}

    after = int_param("after", "the last sequence already seen (0: from the start)", 2**53 - 1)
    feed_item = {"type": "object", "description": "a feed item (docs/feed.md)"}
    return {
        "/v1/events": {
            "get": {
                "operationId": "events",
                "summary": "The caller's tenant's feed items after a sequence (long poll)",
                "parameters": [
                    after,
                    int_param("limit", "at most this many items (1-1000)", 1000),
                    int_param("wait", "seconds to wait for an item when there is none", 30),
                ],
                "responses": {
                    "200": {
                        "description": "items, and the sequence to ask after next",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "properties": {
                                        "items": {"type": "array", "items": feed_item},
                                        "nextAfter": {"type": "integer"},
                                    },
                                }
                            }
                        },
                    },
                    "default": _problem_response("the request's error"),
                },
            }
        },
        "/v1/events/stream": {
            "get": {
                "operationId": "eventsStream",
                "summary": "The feed as server-sent events; Last-Event-ID resumes",
                "parameters": [after],
                "responses": {
                    "200": {
                        "description": "one event per item: id = sequence, event = type",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    },
                    "default": _problem_response("the request's error"),
                },
            }
        },
        "/v1/messages/{messageId}/raw": _download(
            "messageRaw",
            "A message's raw MIME, streamed from the sealed blob",
            "message/rfc822",
            ["messageId"],
        ),
        "/v1/messages/{messageId}/attachments/{attachmentId}": _download(
            "messageAttachment",
            "One attachment's decoded bytes, streamed (ids from get-message)",
            "application/octet-stream",
            ["messageId", "attachmentId"],
        ),
        "/v1/uploads": _upload(),
        "/healthz": plain("healthz: the process answers"),
        "/readyz": plain("readyz: the store answers"),
        "/metrics": plain("metrics: Prometheus text", "text/plain"),
    }


def _download(operation: str, summary: str, media: str, names: list[str]) -> dict[str, Any]:
    return {
        "get": {
            "operationId": operation,
            "summary": summary,
            "parameters": [
                {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                for name in names
            ],
            "responses": {
                "200": {
                    "description": "the bytes, as an attachment (Content-Disposition)",
                    "content": {media: {"schema": {"type": "string", "format": "binary"}}},
                },
                "default": _problem_response("404 for another tenant's message or attachment"),
            },
        }
    }


def _upload() -> dict[str, Any]:
    def query(name: str, description: str) -> dict[str, Any]:
        schema = {"type": "string", "minLength": 1, "maxLength": 255}
        return {
            "name": name,
            "in": "query",
            "required": True,
            "description": description,
            "schema": schema,
        }

    uploaded = {
        "type": "object",
        "properties": {
            "uploadId": {"type": "string"},
            "accountId": {"type": "string"},
            "filename": {"type": "string"},
            "contentType": {"type": "string"},
            "size": {"type": "integer"},
            "expiresAt": {"type": "string", "format": "date-time"},
        },
    }
    return {
        "post": {
            "operationId": "upload",
            "summary": "A file to attach later (send-message's attachments: uploadId), "
            "streamed into a sealed blob of the account; kept until sent or for a day",
            "parameters": [
                query("accountId", "the account that will send it (only it can)"),
                query("filename", "the attachment's file name (no CR or LF)"),
            ],
            "requestBody": {
                "required": True,
                "content": {
                    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
                },
            },
            "responses": {
                "200": {
                    "description": "the upload",
                    "content": {"application/json": {"schema": uploaded}},
                },
                "default": _problem_response(
                    "413 past max_send_mb, 408 slower than the upload deadline, 429 over the "
                    "tenant's uploads at once, 404 for an account the caller cannot send from"
                ),
            },
        }
    }
