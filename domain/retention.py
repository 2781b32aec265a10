"""How long a custom-field value is kept, and what its expiry does.

``keepFor`` is a count and a unit: ``d`` days, ``w`` weeks, ``m`` calendar months,
``y`` calendar years, from 30 days to 10 years (``30d``..``3650d``, ``5w``..``521w``,
``1m``..``120m``, ``1y``..``10y``). A value set at ``t`` is expired at ``now`` when
``t <= now - keepFor``: months and years are subtracted on the calendar, a day that
does not exist in the target month becoming its last day (31 March - 1m = 28/29 Feb).
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

Action = Literal["delete", "anonymize"]
ACTIONS: tuple[Action, ...] = ("delete", "anonymize")

_KEEP_FOR = re.compile(r"([1-9][0-9]{0,3})([dwmy])")
# The bounds of each unit: at least 30 days, at most 10 years.
BOUNDS = {"d": (30, 3650), "w": (5, 521), "m": (1, 120), "y": (1, 10)}


class InvalidRetention(ValueError):
    """A retention that does not parse or lies out of bounds; the message says which."""


@dataclass(frozen=True)
class Retention:
    keep_for: str
    action: Action

    def __post_init__(self) -> None:
        _parse(self.keep_for)
        if self.action not in ACTIONS:
            raise InvalidRetention(f"action must be one of {list(ACTIONS)}")

    def to_json(self) -> dict[str, Any]:
        return {"keepFor": self.keep_for, "action": self.action}

    @staticmethod
    def from_json(data: Any) -> Retention | None:
        """The retention an event holds (None: values are kept for ever)."""
        if data is None:
            return None
        if not isinstance(data, dict) or set(data) != {"keepFor", "action"}:
            raise InvalidRetention('expected {"keepFor": ..., "action": ...}')
        return Retention(keep_for=data["keepFor"], action=data["action"])

    def cutoff(self, now: datetime) -> datetime:
        """The latest set time of a value expired at ``now``."""
        return keep_for_cutoff(self.keep_for, now)


def check_keep_for(keep_for: Any) -> str:
    """``keep_for`` when it parses and lies within the bounds (else ``InvalidRetention``)."""
    _parse(keep_for)
    return str(keep_for)


def keep_for_cutoff(keep_for: str, now: datetime) -> datetime:
    """The latest time of a thing kept for ``keep_for`` that has expired at ``now``."""
    count, unit = _parse(keep_for)
    if unit == "d":
        return now - timedelta(days=count)
    if unit == "w":
        return now - timedelta(weeks=count)
    months = count if unit == "m" else 12 * count
    return months_before(now, months)


# Mean days per unit: enough to order two ``keepFor`` of different units.
_MEAN_DAYS = {"d": 1.0, "w": 7.0, "m": 365.2425 / 12, "y": 365.2425}


def keep_for_days(keep_for: str) -> float:
    """The mean length of ``keep_for`` in days (for comparing, never for cutoffs)."""
    count, unit = _parse(keep_for)
    return count * _MEAN_DAYS[unit]


def _parse(keep_for: Any) -> tuple[int, str]:
    match = _KEEP_FOR.fullmatch(keep_for) if isinstance(keep_for, str) else None
    if match is None:
        raise InvalidRetention("keepFor must be a count and a unit d, w, m or y (e.g. 30d, 18m)")
    count, unit = int(match[1]), match[2]
    low, high = BOUNDS[unit]
    if not low <= count <= high:
        raise InvalidRetention(
            f"keepFor must lie within {low}{unit}..{high}{unit} (30 days to 10 years)"
        )
    return count, unit


def months_before(moment: datetime, months: int) -> datetime:
    """``moment`` moved back ``months`` calendar months, the day clamped to the month."""
    index = moment.year * 12 + (moment.month - 1) - months
    year, month = divmod(index, 12)
    day = min(moment.day, calendar.monthrange(year, month + 1)[1])
    return moment.replace(year=year, month=month + 1, day=day)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def micros(moment: datetime) -> int:
    """Microseconds since the epoch, exactly (no float on the way): how the read model
    keeps set times."""
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(count: int) -> datetime:
    """The UTC time ``count`` microseconds after the epoch (``micros`` undone)."""
    return _EPOCH + timedelta(microseconds=count)
