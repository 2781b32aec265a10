"""``BoundedMessage``: the compat32 ``Message`` whose header parameters (boundary, charset,
name, …) are read from the first ``MAX_PARAM_CHARS`` of the header.

The stdlib's parameter parser is quadratic in the length of a header, and the parser
asks for the boundary of every multipart it meets: one megabyte-long Content-Type would
hold a parse for minutes. No real header carries its parameters that far out.
"""

from __future__ import annotations

from email.message import Message
from typing import Any

MAX_PARAM_CHARS = 8 * 1024


class BoundedMessage(Message):
    # ``get_param``, ``get_params``, ``get_boundary`` and ``get_content_charset`` all read
    # parameters through this one (private, stable since Python 3.0) method.
    def _get_params_preserve(self, failobj: Any, header: str) -> Any:
        value = self.get(header)
        if isinstance(value, str) and len(value) > MAX_PARAM_CHARS:
            head = Message()
            head[header] = value[:MAX_PARAM_CHARS]
            return head._get_params_preserve(failobj, header)  # type: ignore[attr-defined]
        return super()._get_params_preserve(failobj, header)  # type: ignore[misc]
