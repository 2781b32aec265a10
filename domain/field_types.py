"""Custom-field types: what a field's options may say, and which values a field accepts.

Validation is strict — JSON types are never coerced: ``"42"`` is not a number and
``"yes"`` is not a boolean. Validators return the value in its canonical stored form
(money amounts as decimal strings) or a list of human-readable issues.

Every accepted value and option can be stored and read back exactly, and fits the read
models' columns: numbers are finite, integers lie within ±``MAX_SAFE_INTEGER`` (what a
JSON reader in any language keeps exact), ``maxLength`` is at most ``MAX_MAX_LENGTH``,
strings at most ``max_text_bytes`` of UTF-8, money amounts (exact decimal strings) at
most ``MAX_AMOUNT_DIGITS`` digits before the point and ``MAX_AMOUNT_DECIMALS`` after.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date
from decimal import Decimal, InvalidOperation
from typing import Any, Literal
from urllib.parse import urlsplit

FieldType = Literal[
    "text", "number", "boolean", "date", "enum", "multi_enum", "money", "email", "url"
]
FIELD_TYPES: tuple[FieldType, ...] = (
    "text",
    "number",
    "boolean",
    "date",
    "enum",
    "multi_enum",
    "money",
    "email",
    "url",
)

# Active ISO 4217 codes.
CURRENCIES = frozenset(
    """AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BRL BSD
    BTN BWP BYN BZD CAD CDF CHF CLP CNY COP CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR
    FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD
    JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT
    MOP MRU MUR MVR MWK MXN MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG
    QAR RON RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS
    TMT TND TOP TRY TTD TWD TZS UAH UGX USD UYU UZS VES VND VUV WST XAF XCD XCG XOF XPF YER
    ZAR ZMW ZWG""".split()
)

MAX_SAFE_INTEGER = 2**53 - 1
MAX_MAX_LENGTH = 1_000_000
MAX_TEXT_BYTES = 64 * 1024
MAX_AMOUNT_DIGITS = 30
MAX_AMOUNT_DECIMALS = 18

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_AMOUNT = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
_EMAIL = re.compile(
    r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@"
    r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)


@dataclass(frozen=True)
class FieldSpec:
    """A field's type and its type options, as given in a definition's ``field``."""

    type: FieldType
    options: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, **self.options}


class Invalid(Exception):
    """A value or option does not fit; ``issues`` says why, one line each."""

    def __init__(self, issues: list[str]) -> None:
        super().__init__("; ".join(issues))
        self.issues = issues


def _number_issue(value: Any) -> str | None:
    """Why ``value`` is not a JSON number that round-trips exactly (finite, and a safe
    integer when integral), or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "must be a number"
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    if isinstance(value, int) and not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        return f"must lie within ±{MAX_SAFE_INTEGER} when an integer"
    return None


def _is_number(value: Any) -> bool:
    return _number_issue(value) is None


def _string_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


# --- field options -----------------------------------------------------------------

_ALLOWED_OPTIONS: dict[str, frozenset[str]] = {
    "text": frozenset({"maxLength"}),
    "number": frozenset({"min", "max"}),
    "boolean": frozenset(),
    "date": frozenset(),
    "enum": frozenset({"options"}),
    "multi_enum": frozenset({"options"}),
    "money": frozenset({"currency"}),
    "email": frozenset(),
    "url": frozenset(),
}


def check_field_spec(field_type: str, options: Mapping[str, Any]) -> FieldSpec:  # noqa: C901, PLR0912
    """Validate a definition's type options; raise ``Invalid`` with every issue found."""
    if field_type not in _ALLOWED_OPTIONS:
        raise Invalid([f"unknown field type {field_type!r}; expected one of {list(FIELD_TYPES)}"])
    issues = [
        f"option {name!r} does not apply to type {field_type}"
        for name in options
        if name not in _ALLOWED_OPTIONS[field_type]
    ]
    if field_type == "text" and "maxLength" in options:
        max_length = options["maxLength"]
        if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length < 1:
            issues.append("maxLength must be a positive integer")
        elif max_length > MAX_MAX_LENGTH:
            issues.append(f"maxLength must be at most {MAX_MAX_LENGTH}")
    if field_type == "number":
        for bound in ("min", "max"):
            issue = _number_issue(options[bound]) if bound in options else None
            if issue:
                issues.append(f"{bound} {issue}")
        if (
            _is_number(options.get("min"))
            and _is_number(options.get("max"))
            and options["min"] > options["max"]
        ):
            issues.append("min must not exceed max")
    if field_type in ("enum", "multi_enum"):
        choices = options.get("options")
        if not _string_list(choices) or not choices:
            issues.append("options must be a non-empty list of strings")
        elif len(set(choices)) != len(choices):
            issues.append("options must be unique")
    if field_type == "money" and "currency" in options and options["currency"] not in CURRENCIES:
        issues.append("currency must be an ISO 4217 code")
    if issues:
        raise Invalid(issues)
    return FieldSpec(type=field_type, options=dict(options))  # type: ignore[arg-type]


# --- values ------------------------------------------------------------------------


def _fits(value: str, max_bytes: int) -> None:
    # Counted in UTF-8 bytes, what the columns hold; len() first spares encoding a huge one.
    if len(value) > max_bytes or len(value.encode("utf-8", "replace")) > max_bytes:
        raise Invalid([f"longer than {max_bytes} bytes of UTF-8"])


def _text(spec: FieldSpec, value: Any, max_bytes: int) -> Any:
    if not isinstance(value, str):
        raise Invalid(["expected a string"])
    _fits(value, max_bytes)
    max_length = spec.options.get("maxLength")
    if max_length is not None and len(value) > max_length:
        raise Invalid([f"longer than maxLength {max_length}"])
    return value


def _number(spec: FieldSpec, value: Any, max_bytes: int) -> Any:
    issue = _number_issue(value)
    if issue == "must be a number":
        raise Invalid(["expected a number"])
    if issue:
        raise Invalid([f"the value {issue}"])
    issues = []
    if "min" in spec.options and value < spec.options["min"]:
        issues.append(f"less than min {spec.options['min']}")
    if "max" in spec.options and value > spec.options["max"]:
        issues.append(f"greater than max {spec.options['max']}")
    if issues:
        raise Invalid(issues)
    return value


def _boolean(spec: FieldSpec, value: Any, max_bytes: int) -> Any:
    if not isinstance(value, bool):
        raise Invalid(["expected true or false"])
    return value


def _date(spec: FieldSpec, value: Any, max_bytes: int) -> Any:
    if not isinstance(value, str) or not _DATE.match(value):
        raise Invalid(["expected a date as YYYY-MM-DD"])
    try:
        date.fromisoformat(value)
    except ValueError:
        raise Invalid(["not a calendar day"]) from None
    return value


def _enum(spec: FieldSpec, value: Any, max_bytes: int) -> Any:
    if not isinstance(value, str) or value not in spec.options["options"]:
        raise Invalid([f"expected one of {spec.options['options']}"])
    return value


def _multi_enum(spec: FieldSpec, value: Any, max_bytes: int) -> Any:
    if not _string_list(value):
        raise Invalid(["expected a list of options"])
    issues = [f"{v!r} is not one of the options" for v in value if v not in spec.options["options"]]
    if len(set(value)) != len(value):
        issues.append("options must be distinct")
    if issues:
        raise Invalid(issues)
    return value


def _decimals(amount: Decimal) -> int:
    exponent = amount.as_tuple().exponent
    return -exponent if isinstance(exponent, int) and exponent < 0 else 0


def _money(spec: FieldSpec, value: Any, max_bytes: int) -> Any:
    if not isinstance(value, dict) or set(value) != {"amount", "currency"}:
        raise Invalid(['expected {"amount": ..., "currency": ...}'])
    amount, currency = value["amount"], value["currency"]
    issues = []
    parsed: Decimal | None = None
    # Strings must be plain decimals: Decimal() alone would also take " 1_000 " or "1e3".
    # The length check first: a regex or Decimal over a megabyte of digits costs.
    if (isinstance(amount, str) and len(amount) <= 64 and _AMOUNT.fullmatch(amount)) or _is_number(
        amount
    ):
        try:
            parsed = Decimal(str(amount))
        except InvalidOperation:
            parsed = None
    if parsed is None or not parsed.is_finite():
        issues.append("amount must be a decimal string or a number")
    # copy_abs, not abs(): abs() rounds to the context precision (28 digits).
    elif parsed.copy_abs() >= 10**MAX_AMOUNT_DIGITS or _decimals(parsed) > MAX_AMOUNT_DECIMALS:
        issues.append(
            f"amount must have at most {MAX_AMOUNT_DIGITS} digits before the point"
            f" and {MAX_AMOUNT_DECIMALS} after"
        )
        parsed = None
    if not isinstance(currency, str) or currency not in CURRENCIES:
        issues.append("currency must be an ISO 4217 code")
    elif spec.options.get("currency") not in (None, currency):
        issues.append(f"currency must be {spec.options['currency']}")
    if issues or parsed is None:
        raise Invalid(issues)
    # Canonical: plain notation, never an exponent (a float 1e-07 becomes "0.0000001").
    return {"amount": format(parsed, "f"), "currency": currency}


def _email(spec: FieldSpec, value: Any, max_bytes: int) -> Any:
    if not isinstance(value, str) or len(value) > 254 or not _EMAIL.fullmatch(value):
        raise Invalid(["expected an address like local@domain"])
    return value


def _url(spec: FieldSpec, value: Any, max_bytes: int) -> Any:
    if not isinstance(value, str):
        raise Invalid(["expected an absolute http or https URL"])
    _fits(value, max_bytes)
    # urlsplit silently drops tabs and newlines, so whitespace is refused up front.
    if any(c.isspace() or not c.isprintable() for c in value):
        raise Invalid(["expected an absolute http or https URL"])
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        raise Invalid(["expected an absolute http or https URL"]) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Invalid(["expected an absolute http or https URL"])
    return value


_VALIDATORS: dict[str, Callable[[FieldSpec, Any, int], Any]] = {
    "text": _text,
    "number": _number,
    "boolean": _boolean,
    "date": _date,
    "enum": _enum,
    "multi_enum": _multi_enum,
    "money": _money,
    "email": _email,
    "url": _url,
}


def validate_value(spec: FieldSpec, value: Any, *, max_text_bytes: int = MAX_TEXT_BYTES) -> Any:
    """Return the canonical form of ``value`` for ``spec``, or raise ``Invalid``."""
    return _VALIDATORS[spec.type](spec, value, max_text_bytes)


# --- anonymous forms ---------------------------------------------------------------

ANONYMIZED_TEXT = "[anonymized]"
ANONYMIZED_EMAIL = "anonymized@invalid"
ANONYMIZED_URL = "https://anonymized.invalid/"


def anonymous_value(spec: FieldSpec) -> Any | None:
    """What an anonymized value of ``spec`` becomes; None: the value is cleared.

    Text, email and url keep a marker that says a value was there (text only when the
    marker fits ``maxLength``); numbers, dates, booleans, choices and money are cleared,
    since any value of theirs would read as a real one."""
    if spec.type == "text":
        max_length = spec.options.get("maxLength")
        fits = max_length is None or len(ANONYMIZED_TEXT) <= max_length
        return ANONYMIZED_TEXT if fits else None
    if spec.type == "email":
        return ANONYMIZED_EMAIL
    if spec.type == "url":
        return ANONYMIZED_URL
    return None
