"""An account's timeline as SVG, drawn on the server from ``get-mail-account-timeline``:
one column per bucket over the window — syncs as a bar (scaled to the busiest bucket),
failures as a red mark above it (its kinds in the column's tooltip), the tier the watch
reported as a band below. No script; every text escaped; classes from the stylesheet.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from markupsafe import Markup, escape

COLUMN = 3
HEIGHT = 90
TOP = 22
BAND = 8
BUCKET = timedelta(minutes=5)
TIERS = {"hot": "tier-hot", "warm": "tier-warm", "cold": "tier-cold"}


def timeline_chart(data: dict[str, Any], now: datetime) -> Markup:
    since = datetime.fromisoformat(data["since"])
    columns = max(1, int((now - since) / BUCKET))
    width = columns * COLUMN
    busiest = max((b["synced"] for b in data["buckets"]), default=0) or 1
    failures = sum(sum(b["failed"].values()) for b in data["buckets"])
    syncs = sum(b["synced"] for b in data["buckets"])
    title = f"Syncs, failures and tiers since {since:%Y-%m-%d %H:%M} UTC"
    parts = [
        f'<svg class="chart timeline" role="img" viewBox="0 0 {width + 40} {HEIGHT + 72}" '
        f'width="{width + 40}" height="{HEIGHT + 72}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}: {syncs} syncs, {failures} failures</title>",
        f'<text x="0" y="14" class="chart-title">{escape(title)}</text>',
        f'<line x1="0" y1="{TOP + HEIGHT}" x2="{width}" y2="{TOP + HEIGHT}" class="axis"/>',
    ]
    for bucket in data["buckets"]:
        start = datetime.fromisoformat(bucket["start"])
        x = int((start - since) / BUCKET) * COLUMN
        if not 0 <= x < width:
            continue
        parts.append(_column(bucket, x, busiest))
    for hours in range(0, int((now - since).total_seconds() // 3600) + 1, 6):
        at = since + timedelta(hours=hours)
        x = hours * 12 * COLUMN
        parts.append(
            f'<text x="{x}" y="{TOP + HEIGHT + BAND + 18}" class="chart-label">{at:%H:%M}</text>'
        )
    parts.append(
        f'<text x="0" y="{TOP + HEIGHT + BAND + 36}" class="chart-label">'
        f"{syncs} syncs · {failures} failures · bands: tier reported (hot, warm, cold)</text>"
    )
    parts.append("</svg>")
    # Every interpolated text above went through escape(), or is a number made here.
    return Markup("".join(parts))  # noqa: S704


def _column(bucket: dict[str, Any], x: int, busiest: int) -> str:
    height = max(1, round(HEIGHT * bucket["synced"] / busiest)) if bucket["synced"] else 0
    failed = ", ".join(f"{kind}: {n}" for kind, n in bucket["failed"].items())
    tip = f"{bucket['start']}: {bucket['synced']} syncs" + (f", failed: {failed}" if failed else "")
    out = [f"<g><title>{escape(tip)}</title>"]
    if height:
        out.append(
            f'<rect x="{x}" y="{TOP + HEIGHT - height}" width="{COLUMN - 1}" '
            f'height="{height}" class="chart-bar"/>'
        )
    if bucket["failed"]:
        out.append(f'<rect x="{x}" y="{TOP - 6}" width="{COLUMN}" height="6" class="failed"/>')
    for tier in bucket["tiers"][:1]:
        css = TIERS.get(tier, "tier-other")
        out.append(
            f'<rect x="{x}" y="{TOP + HEIGHT + 2}" width="{COLUMN}" height="{BAND}" class="{css}"/>'
        )
    out.append("</g>")
    return "".join(out)
