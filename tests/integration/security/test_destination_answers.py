"""A strict deployment answers one way for a host that resolves inside and for one that
does not resolve at all (both backends): two answers would let a tenant probe which
internal names exist."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from application import User
from application.app import App
from tests.integration.security.test_accounts import connect_payload
from tests.support.results import failed

INTERNAL = "localhost"
NOWHERE = "no-such-host.invalid"


@pytest.mark.parametrize("verify", [False, True])
def test_connect_answers_alike_for_internal_and_unresolved_hosts(
    make_app: Callable[..., App], admin: User, verify: bool
) -> None:
    strict = make_app(allow_private_hosts=False)
    answers = [
        failed(
            strict.write("connect-mail-account", connect_payload(143, host, verify=verify), admin),
            "host_not_allowed",
            422,
        )
        for host in (INTERNAL, NOWHERE)
    ]
    assert [sorted(a) for a in answers] == [["host", "setting"]] * 2
    results = [
        strict.write("connect-mail-account", connect_payload(143, h, verify=verify), admin)
        for h in (INTERNAL, NOWHERE)
    ]
    assert results[0].error is not None and results[1].error is not None
    assert results[0].error.message == results[1].error.message


def test_webhooks_answer_alike_for_internal_and_unresolved_hosts(
    make_app: Callable[..., App], admin: User
) -> None:
    strict = make_app(allow_private_hosts=False)
    errors = []
    for host in (INTERNAL, NOWHERE):
        payload = {"url": f"https://{host}/hook", "events": ["*"]}
        result = strict.write("create-webhook", payload, admin)
        failed(result, "host_not_allowed", 422)
        assert result.error is not None
        errors.append((result.error.message, sorted(result.error.details)))
    assert errors[0] == errors[1]
