"""Charts drawn on the server as SVG: no script, no external file, every label escaped.

A horizontal bar chart: one labelled bar per row, scaled to the largest value. The
SVG is inline in the page (the CSP allows no inline style, so colours are presentation
attributes and classes from the console's stylesheet).
"""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

from infrastructure.http.console.text import shown

ROW = 22
LABEL_WIDTH = 220
BAR_WIDTH = 360
MAX_ROWS = 50


def bars(title: str, rows: Sequence[tuple[str, float]], unit: str) -> Markup:
    shown_rows = list(rows)[:MAX_ROWS]
    height = ROW * max(1, len(shown_rows)) + 30
    width = LABEL_WIDTH + BAR_WIDTH + 90
    top = max((value for _, value in shown_rows), default=0.0) or 1.0
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        f'<text x="0" y="14" class="chart-title">{escape(title)}</text>',
    ]
    for index, (label, value) in enumerate(shown_rows):
        y = 24 + index * ROW
        length = max(1.0, BAR_WIDTH * max(0.0, value) / top) if value > 0 else 0.0
        parts.append(
            f'<text x="0" y="{y + 14}" class="chart-label">{escape(shown(label, 30))}</text>'
            f'<rect x="{LABEL_WIDTH}" y="{y + 3}" width="{length:.1f}" height="{ROW - 8}" '
            f'class="chart-bar"/>'
            f'<text x="{LABEL_WIDTH + length + 6:.1f}" y="{y + 14}" class="chart-value">'
            f"{escape(_number(value))} {escape(unit)}</text>"
        )
    if not shown_rows:
        parts.append('<text x="0" y="40" class="chart-label">nothing to show yet</text>')
    parts.append("</svg>")
    # Every value interpolated above went through escape() (or is a number we made).
    return Markup("".join(parts))  # noqa: S704


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"
