"""Signing in and out, the console's root, and its two static files.

Sign-in is a form POST of an API key (never a query string, so the key stays out of
logs and history); success sets the session cookie — ``HttpOnly``, ``SameSite=Strict``,
``Secure`` when the request came over TLS, path ``/console`` — and a refusal shows the
form again with the status the API would give (401 or 429). Sign-out is a POST with the
session's CSRF token; it ends the session (and its streams) and clears the cookie.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI, Request
from starlette.responses import RedirectResponse, Response

from infrastructure.http.console.gate import COOKIE, FormRefused, SignInRefused
from infrastructure.http.console.pages import Console, Redirect

STATIC = {"console.js": "text/javascript", "console.css": "text/css"}


def entry_routes(api: FastAPI, console: Console, lifetime: float) -> None:
    _static_routes(api)
    _sign_routes(api, console, lifetime)


def _static_routes(api: FastAPI) -> None:
    files = {
        name: (resources.files(__package__).joinpath("static", name).read_bytes(), media)
        for name, media in STATIC.items()
    }

    @api.exception_handler(Redirect)
    async def redirect(request: Request, error: Redirect) -> Response:
        return error.response

    @api.get("/console", include_in_schema=False)
    async def root(request: Request) -> Response:
        return RedirectResponse("/console/accounts", 303)

    @api.get("/console/static/{name}", include_in_schema=False)
    async def static(name: str) -> Response:
        if name not in files:
            return Response(b"not found", 404, media_type="text/plain")
        body, media = files[name]
        return Response(body, media_type=f"{media}; charset=utf-8")


def _sign_routes(api: FastAPI, console: Console, lifetime: float) -> None:

    @api.get("/console/sign-in", include_in_schema=False)
    async def sign_in_form(request: Request) -> Response:
        if await console.gate.signed_in(request) is not None:
            return RedirectResponse("/console/accounts", 303)
        return console.renderer.page("sign_in.html", error=None)

    @api.post("/console/sign-in", include_in_schema=False)
    async def sign_in(request: Request) -> Response:
        try:
            form = await console.gate.form(request, None)
        except FormRefused as refused:
            return console.renderer.page("sign_in.html", refused.status, error=refused.reason)
        opened = await console.gate.sign_in(request, form.get("key", "").strip())
        if isinstance(opened, SignInRefused):
            response = console.renderer.page("sign_in.html", opened.status, error=opened.reason)
            if opened.retry_after:
                response.headers["Retry-After"] = str(int(opened.retry_after))
            return response
        signed_in = RedirectResponse("/console/accounts", 303)
        signed_in.set_cookie(
            COOKIE,
            opened.id,
            max_age=int(lifetime),
            path="/console",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return signed_in

    @api.post("/console/sign-out", include_in_schema=False)
    async def sign_out(request: Request) -> Response:
        signed = await console.require(request)
        try:
            await console.gate.form(request, signed.session)
        except FormRefused as refused:
            return console.refused(signed, refused.status, refused.reason)
        console.gate.sessions.end(signed.session)
        response = RedirectResponse("/console/sign-in", 303)
        response.delete_cookie(COOKIE, path="/console", httponly=True, samesite="strict")
        return response
