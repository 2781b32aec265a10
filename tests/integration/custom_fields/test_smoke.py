from application import User
from application.app import App


def test_define_set_get(app: App, admin: User) -> None:
    assert app.write(
        "define-tenant-field",
        {"entityName": "contact", "fieldKey": "tier", "field": {"type": "text"}},
        admin,
    ).is_success
    assert app.write(
        "set-custom-field",
        {"entityName": "contact", "entityId": "c1", "fieldKey": "tier", "value": "gold"},
        admin,
    ).is_success
    app.projections.catch_up()
    got = app.query("get-entity", {"entityName": "contact", "entityId": "c1"}, admin)
    assert got.data == {"entityName": "contact", "entityId": "c1", "customFields": {"tier": "gold"}}
