"""Random histories of define / update / set / clear / delete / re-define across two
tenants and the system scope, checked against a plain in-memory model of docs/app-layer.md — and
the answers must not change after a rebuild. Both backends.

One app serves every example (built once per backend); each example works on fresh
tenant ids and a fresh entity name, so examples cannot see each other's data, system
fields included.
"""

from __future__ import annotations

import builtins
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from application import SYSTEM_TENANT_ID, Result, User
from application.app import App
from tests.support.results import ok

KEYS = ("k1", "k2")
ENTITY_IDS = ("e1", "e2", "e3")
TYPES = ("text", "number", "boolean", "enum")
ENUM_OPTIONS = ["a", "b"]
VALUES: list[Any] = ["a", "b", "x", "", 0, 3, -2, 1.5, True, False, "42", "yes"]

OPS = st.one_of(
    st.tuples(
        st.just("define"),
        st.sampled_from("ABS"),
        st.sampled_from(KEYS),
        st.sampled_from(TYPES),
        st.booleans(),
    ),
    st.tuples(
        st.just("update"),
        st.sampled_from("AB"),
        st.sampled_from(KEYS),
        st.sampled_from(TYPES),
        st.booleans(),
    ),
    st.tuples(st.just("delete"), st.sampled_from("ABS"), st.sampled_from(KEYS)),
    st.tuples(
        st.just("set"),
        st.sampled_from("AB"),
        st.sampled_from(ENTITY_IDS),
        st.sampled_from(KEYS),
        st.sampled_from(VALUES),
    ),
    st.tuples(
        st.just("set"),
        st.sampled_from("AB"),
        st.sampled_from(ENTITY_IDS),
        st.sampled_from(KEYS),
        st.sampled_from(VALUES),
    ),
    st.tuples(
        st.just("clear"), st.sampled_from("AB"), st.sampled_from(ENTITY_IDS), st.sampled_from(KEYS)
    ),
    st.tuples(st.just("catch_up")),
)


# --- the model: what docs/app-layer.md says the answers are ------------------------------------


@dataclass
class Definition:
    type: str = "text"
    searchable: bool = False
    generation: int = 0
    active: bool = False


def valid(field_type: str, value: Any) -> bool:
    if field_type == "text":
        return isinstance(value, str)
    if field_type == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if field_type == "boolean":
        return isinstance(value, bool)
    return isinstance(value, str) and value in ENUM_OPTIONS


@dataclass
class Model:
    definitions: dict[tuple[str, str], Definition] = field(default_factory=dict)
    # (tenant, entity id) -> key -> (owner, generation, value); a row exists once set
    rows: dict[tuple[str, str], dict[str, tuple[str, int, Any]]] = field(default_factory=dict)

    def definition(self, owner: str, key: str) -> Definition:
        return self.definitions.setdefault((owner, key), Definition())

    def resolve(self, tenant: str, key: str) -> tuple[str, Definition] | None:
        """The tenant's own active definition, else the system's."""
        for owner in (tenant, "S"):
            if self.definition(owner, key).active:
                return owner, self.definition(owner, key)
        return None

    def define(self, owner: str, key: str, field_type: str, searchable: bool) -> str:
        if owner != "S" and self.definition("S", key).active:
            return "field_key_reserved"
        current = self.definition(owner, key)
        if current.active:
            return "version_conflict"
        self.definitions[owner, key] = Definition(
            field_type, searchable, current.generation + 1, True
        )
        return "ok"

    def update(self, owner: str, key: str, field_type: str, searchable: bool) -> str:
        current = self.definition(owner, key)
        if not current.active:
            return "not_found"
        if current.type != field_type:
            return "field_type_immutable"
        current.searchable = searchable
        return "ok"

    def delete(self, owner: str, key: str) -> str:
        current = self.definition(owner, key)
        if not current.active:
            return "not_found"
        current.active = False
        for (tenant, _), row in self.rows.items():
            if owner == tenant or (owner == "S" and not self.definition(tenant, key).active):
                row.pop(key, None)
        return "ok"

    def set(self, tenant: str, entity_id: str, key: str, value: Any) -> str:
        resolved = self.resolve(tenant, key)
        if resolved is None:
            return "not_found"
        owner, definition = resolved
        if not valid(definition.type, value):
            return "custom_field_value_invalid"
        self.rows.setdefault((tenant, entity_id), {})[key] = (owner, definition.generation, value)
        return "ok"

    def clear(self, tenant: str, entity_id: str, key: str) -> tuple[str, bool]:
        resolved = self.resolve(tenant, key)
        if resolved is None:
            return "not_found", False
        owner, definition = resolved
        row = self.rows.get((tenant, entity_id), {})
        held = row.get(key)
        if held is None or held[:2] != (owner, definition.generation):
            return "ok", False
        del row[key]
        return "ok", True

    # the answers

    def fields(self, tenant: str, entity_id: str) -> dict[str, Any] | None:
        row = self.rows.get((tenant, entity_id))
        return None if row is None else {key: held[2] for key, held in row.items()}

    def listed_definitions(self, tenant: str) -> list[tuple[str, str, str, bool]]:
        # ordered by key, then owner ("system" sorts before the "t..." tenant ids)
        return [
            ("system" if owner == "S" else "tenant", key, d.type, d.searchable)
            for (owner, key), d in sorted(
                self.definitions.items(), key=lambda item: (item[0][1], item[0][0] != "S")
            )
            if d.active and owner in (tenant, "S")
        ]

    def searchable(self, tenant: str) -> builtins.set[str]:
        """Keys whose governing definition (as ``resolve``: the tenant's own first) is
        searchable."""
        return {
            key
            for key in KEYS
            if (resolved := self.resolve(tenant, key)) is not None and resolved[1].searchable
        }


# --- the system under test ----------------------------------------------------------


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


class Subject:
    def __init__(self, app: App) -> None:
        self.app = app
        self.entity = "ent" + uuid.uuid4().hex[:10]
        self.users = {
            name: User(
                f"admin-{name}", f"t{name}-{uuid.uuid4().hex[:8]}", frozenset({"TenantAdmin"})
            )
            for name in "AB"
        }
        self.users["S"] = User("operator", SYSTEM_TENANT_ID, frozenset({"SystemAdmin"}))

    def spec(self, field_type: str) -> dict[str, Any]:
        return {"type": field_type, **({"options": ENUM_OPTIONS} if field_type == "enum" else {})}

    def run(self, op: tuple[Any, ...]) -> Result | None:
        kind, *args = op
        write = self.app.write
        if kind == "catch_up":
            self.app.projections.catch_up()
            return None
        if kind in ("define", "update"):
            owner, key, field_type, searchable = args
            name = {"define": "define-tenant-field", "update": "update-tenant-field"}[kind]
            if owner == "S":
                name = "define-system-field"
            return write(
                name,
                {
                    "entityName": self.entity,
                    "fieldKey": key,
                    "field": self.spec(field_type),
                    "searchable": searchable,
                },
                self.users[owner],
            )
        if kind == "delete":
            owner, key = args
            name = "delete-system-field" if owner == "S" else "delete-tenant-field"
            return write(name, {"entityName": self.entity, "fieldKey": key}, self.users[owner])
        tenant, entity_id, key, *value = args
        payload = {"entityName": self.entity, "entityId": entity_id, "fieldKey": key}
        if kind == "set":
            return write("set-custom-field", {**payload, "value": value[0]}, self.users[tenant])
        return write("clear-custom-field", payload, self.users[tenant])

    def answers(self) -> dict[str, Any]:
        query = self.app.query
        found: dict[str, Any] = {}
        for name in "AB":
            user = self.users[name]
            found[f"{name}:definitions"] = [
                (d["scope"], d["fieldKey"], d["field"]["type"], d["searchable"])
                for d in ok(query("list-field-definitions", {"entityName": self.entity}, user))[
                    "items"
                ]
            ]
            for entity_id in ENTITY_IDS:
                got = query("get-entity", {"entityName": self.entity, "entityId": entity_id}, user)
                found[f"{name}:{entity_id}"] = (
                    None
                    if got.error is not None and got.error.status == 404
                    else ok(got)["customFields"]
                )
            listed = ok(query("list-entities", {"entityName": self.entity, "limit": 2}, user))
            found[f"{name}:list-first-page"] = listed["items"]
        return found


def expected_answers(model: Model) -> dict[str, Any]:
    expected: dict[str, Any] = {}
    for name in "AB":
        expected[f"{name}:definitions"] = model.listed_definitions(name)
        for entity_id in ENTITY_IDS:
            expected[f"{name}:{entity_id}"] = model.fields(name, entity_id)
        rows = [(entity_id, model.fields(name, entity_id)) for entity_id in ENTITY_IDS]
        expected[f"{name}:list-first-page"] = [
            {"entityId": entity_id, "customFields": fields}
            for entity_id, fields in rows
            if fields is not None
        ][:2]
    return expected


def check_where(subject: Subject, model: Model) -> None:
    for name in "AB":
        user = subject.users[name]
        for key in KEYS:
            values = {
                canonical(held[2]): held[2]
                for (tenant, _), row in model.rows.items()
                if tenant == name
                for k, held in row.items()
                if k == key
            }
            probe = next(iter(values.values()), "a")
            result = subject.app.query(
                "list-entities",
                {"entityName": subject.entity, "where": {key: probe}, "limit": 50},
                user,
            )
            if key not in model.searchable(name):
                assert result.error is not None and result.error.code == "field_not_searchable"
                continue
            got = [item["entityId"] for item in ok(result)["items"]]
            rows = {entity_id: model.fields(name, entity_id) or {} for entity_id in ENTITY_IDS}
            want = [
                entity_id
                for entity_id, fields in rows.items()
                if key in fields and canonical(fields[key]) == canonical(probe)
            ]
            assert got == want, (key, probe)


@settings(
    max_examples=35,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(OPS, min_size=1, max_size=14))
# Found by this test: the tenant's own (unsearchable) definition of a key the system
# defines too (searchable) governs search as it governs writes.
@example(
    ops=[
        ("define", "B", "k2", "number", False),
        ("define", "S", "k2", "text", True),
        ("set", "B", "e1", "k2", 0),
    ]
)
def test_random_histories_match_the_model_before_and_after_rebuild(
    app: App, ops: list[tuple[Any, ...]]
) -> None:
    subject, model = Subject(app), Model()
    for op in ops:
        result = subject.run(op)
        if result is None:
            continue
        kind, *args = op
        if kind == "clear":
            code, cleared = model.clear(*args)
        else:
            code, cleared = getattr(model, kind)(*args), None
        got = "ok" if result.error is None else result.error.code
        assert got == code, (op, result)
        if cleared is not None and result.data is not None:
            assert result.data["cleared"] is cleared, op

    app.projections.catch_up()
    before = subject.answers()
    assert before == expected_answers(model)
    check_where(subject, model)
    app.projections.rebuild()
    assert subject.answers() == before
