"""The ASGI entry point for ``uvicorn api.main:app`` (settings from ``KG_*``)."""

from api.app import create_app

app = create_app()
