"""What the console shows of a hostile value: escaped by the templates, bounded and free
of control characters, in tables and in the SVG charts; redirects only within it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from infrastructure.http.console.chart import bars
from infrastructure.http.console.pages import back_to
from infrastructure.http.console.render import environment
from infrastructure.http.console.text import MAX_SHOWN, cleaned, shown
from infrastructure.http.console.timeline import timeline_chart

HOSTILE = "<script>alert(1)</script>\"'&\x00\x1b[2J\u202e\u200b" + "A" * 10_000


def test_shown_bounds_and_replaces_control_characters() -> None:
    text = shown(HOSTILE)
    assert len(text) == MAX_SHOWN and text.endswith("\u2026")
    assert not any(c in text for c in "\x00\x1b\u202e\u200b")
    assert shown(None) == "-" and shown("plain") == "plain"
    assert cleaned("a\x00b\u202ec" + "d" * 300, 5) == "abc"  # cut, then cleaned


def test_templates_escape_every_value() -> None:
    env = environment()
    html = env.from_string("<p title='{{ v }}'>{{ v | shown }}</p>").render(v=HOSTILE)
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "&#39;" in html and "&#34;" in html


def test_charts_escape_their_labels() -> None:
    svg = str(bars("<b>title</b>", [(HOSTILE, 3.0), ("ok", 0.0)], "<u>"))
    assert "<script>" not in svg and "<b>" not in svg and "<u>" not in svg
    assert "\x00" not in svg and "\u202e" not in svg
    now = datetime.now(UTC)
    data = {
        "since": (now - timedelta(hours=2)).isoformat(),
        "buckets": [
            {
                "start": (now - timedelta(hours=1)).isoformat(),
                "synced": 3,
                "failed": {HOSTILE: 1},
                "tiers": [HOSTILE],
            }
        ],
    }
    timeline = str(timeline_chart(data, now))
    assert "<script>" not in timeline and "&lt;script&gt;" in timeline
    assert 'class="tier-other"' in timeline  # an unknown tier gets no class of its naming


def test_redirects_stay_within_the_console() -> None:
    assert back_to("/console/accounts?page=2", "/d") == "/console/accounts?page=2"
    for target in (
        None,
        "https://evil.example/",
        "//evil.example/console/",
        "/console//evil",
        "/console/\\evil",
        "/consolex",
        "/console/a b",
        "/console/" + "a" * 3000,
    ):
        assert back_to(target, "/d") == "/d"
