"""The review console: server-rendered pages under ``/ui`` (Jinja2, htmx, cytoscape.js vendored
in ``static/vendor``, no CDN and no build step).

Every page is a thin adapter over the same kg functions as the HTTP API, the CLI and the MCP
server, called as the signed-in key (:mod:`api.ui.session`); each module below is one screen.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles

from api.ui import admin, auth, branches, graph, nodes, playground, review, sql
from api.ui.core import STATIC, error_page, sign_in_redirect
from api.ui.session import SessionCodec, SignInRequired, signed_in

#: The console's screens, in the order of the navigation.
SCREENS = (auth, branches, review, nodes, graph, playground, sql, admin)


def install(app: FastAPI) -> None:
    """Serve the console on ``app``: its routes, its static files and its HTML error pages.

    Parameters
    ----------
    app : FastAPI
        The kg application (``app.state.services`` set).
    """
    app.state.console_codec = SessionCodec(app.state.services.settings)
    app.state.error_page = error_page
    # The request guard lets a signed-in session send a body as large as a key may.
    app.state.console_signed_in = signed_in

    @app.exception_handler(SignInRequired)
    async def _sign_in(request: Request, exc: SignInRequired) -> Response:
        return sign_in_redirect(request, exc)

    app.mount("/ui/static", StaticFiles(directory=STATIC), name="ui-static")
    for screen in SCREENS:
        app.include_router(screen.router, include_in_schema=False)
