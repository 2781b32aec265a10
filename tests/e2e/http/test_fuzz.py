"""The whole API, driven from its own OpenAPI document by schemathesis: whatever a client
sends, no answer is a 5xx, and every error is problem+json.

connect-mail-account and update-mail-account are left out: with ``verify`` they dial the
host they are given, and a fuzzer's hosts are not ours to dial. So is the feed over HTTP:
its long poll and its event stream hold a request open by design (test_api.py covers
their parameters and answers).
"""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings

from tests.e2e.http.test_api import PROBLEM

LEFT_OUT = r"connect-mail-account|update-mail-account|/v1/events"

schema = schemathesis.pytest.from_fixture("api_schema").exclude(path_regex=LEFT_OUT)


@schema.parametrize()
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_answer_is_a_server_error(case: schemathesis.Case[Any], api_key: str) -> None:
    response = case.call(headers={"Authorization": f"Bearer {api_key}"})
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert response.headers["content-type"][0] == PROBLEM
