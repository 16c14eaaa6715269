"""Screen 7: the index status and the function jobs of a repository, and API keys for admins."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from api.ui.core import Console, action, page, ui_url
from kg.access import parse_grant
from kg.context import run
from kg.errors import Forbidden, InvalidInput
from kg.ops import keys as key_ops
from kg.ops.queries import index_status
from kg.rag import function_jobs
from kg.store.models import utcnow

router = APIRouter(prefix="/ui")
PageDep = Annotated[Console, Depends(page)]
ActionDep = Annotated[Console, Depends(action)]
#: Longest a key made in the console may live: ten years, in hours.
MAX_EXPIRY_H = 24 * 365 * 10


@router.get("/r/{repo}/index")
def index_page(repo: str, console: PageDep) -> Response:
    """What the indexer has pending, running and failed, what the index holds (admins of the
    repository), and the function jobs the key may see."""
    jobs = function_jobs.list_jobs(console.services, console.caller, repo, limit=100)
    try:
        queue = index_status(console.services, console.caller, repo).as_json()
        refused = None
    except Forbidden as exc:  # the status names every branch: admins only
        queue, refused = None, exc.message
    return console.render("index.html", section="index", repo=repo, queue=queue, refused=refused, jobs=jobs)


@router.get("/keys")
def keys_page(console: PageDep) -> Response:
    """Every API key (admins only), the form that makes one, and revoke buttons."""
    keys = key_ops.list_keys(console.services, console.caller).keys
    return console.render("keys.html", section="keys", keys=keys, token=None, made=None)


def _grants(text: str) -> list[str]:
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    if not lines:
        raise InvalidInput("name at least one grant, e.g. repo=acme,branches=agent/*,actions=read+write")
    return lines


@router.post("/keys")
def create_key(console: ActionDep) -> Response:
    """Make a key; its token is shown on this page once, and never again."""
    name = console.field("name", required=True)
    assert name is not None
    admin = console.field("admin") == "on"
    lines = _grants(console.field("grants", "") or "") if not admin else \
        [line for line in (console.field("grants", "") or "").splitlines() if line.strip()]
    grants = [parse_grant(line) for line in lines]
    hours = console.field("expires_in_h")
    expires = None
    if hours is not None:
        try:
            value = float(hours)
        except ValueError:
            raise InvalidInput(f"expires in: {hours!r} is not a number of hours") from None
        if not 0 < value <= MAX_EXPIRY_H:
            raise InvalidInput(f"expires in must be more than 0 and at most {MAX_EXPIRY_H} hours")
        expires = utcnow() + timedelta(hours=value)
    made = run(console.services, console.caller, key_ops.create_key, name=name, grants=grants,
               expires_at=expires, admin=admin)
    keys = key_ops.list_keys(console.services, console.caller).keys
    return console.render("keys.html", status=201, section="keys", keys=keys, token=made.key, made=made)


@router.post("/keys/revoke")
def revoke_key(console: ActionDep) -> Response:
    """Revoke a key: refused from its next request on."""
    key_id = console.field("key_id", required=True)
    assert key_id is not None
    run(console.services, console.caller, key_ops.revoke_key, key_id)
    return console.redirect(ui_url("/keys"))
