"""Jinja2 for the console: templates from the package, every value escaped.

Autoescape is on for every template whatever its name (``autoescape=True``, not a
guess from the file's extension), undefined names fail loudly, and no template is
read from anywhere but the package.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.responses import HTMLResponse

from infrastructure.http.console.text import shown


def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("infrastructure.http.console", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["shown"] = shown
    env.filters["when"] = when
    return env


def when(value: Any) -> str:
    """An ISO timestamp as ``YYYY-MM-DD HH:MM:SS`` (UTC as stored), or a dash."""
    if not value:
        return "-"
    try:
        return datetime.fromisoformat(str(value)).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return shown(value)


class Renderer:
    def __init__(self) -> None:
        self.env = environment()

    def page(self, name: str, code: int = 200, **values: Any) -> HTMLResponse:
        html = self.env.get_template(name).render(**values)
        return HTMLResponse(html, code)
