"""The operator's console at ``/console`` (docs/console.md): server-rendered pages over
the application's own queries and commands, signed in with an API key."""

from __future__ import annotations

import time
from collections.abc import Callable

from fastapi import FastAPI

from application.app import App
from application.leases import FleetView
from infrastructure.http.console.accounts import account_routes
from infrastructure.http.console.entry import entry_routes
from infrastructure.http.console.fleet import fleet_routes
from infrastructure.http.console.gate import Gate
from infrastructure.http.console.headers import ConsoleHeaders
from infrastructure.http.console.live import LiveSettings, live_routes
from infrastructure.http.console.pages import Console
from infrastructure.http.console.read_models import read_model_routes
from infrastructure.http.console.render import Renderer
from infrastructure.http.console.sessions import Sessions, SessionSettings
from infrastructure.http.console.tenants import tenant_routes
from infrastructure.http.console.webhooks import webhook_routes
from infrastructure.http.door import Door


def mount_console(
    api: FastAPI,
    app: App,
    door: Door,
    *,
    sessions: SessionSettings | None = None,
    live: LiveSettings | None = None,
    fleet: FleetView | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Console:
    session_settings = sessions or SessionSettings()
    gate = Gate(app, door, Sessions(session_settings), clock)
    console = Console(app, gate, Renderer())
    entry_routes(api, console, session_settings.lifetime)
    account_routes(api, console)
    webhook_routes(api, console)
    read_model_routes(api, console)
    fleet_routes(api, console, fleet)
    tenant_routes(api, console)
    live_routes(api, console, live or LiveSettings())
    api.add_middleware(ConsoleHeaders)
    return console
