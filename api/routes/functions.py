"""Function invocation (API.md, "Functions")."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from pydantic import Field

from api.deps import ServicesDep
from api.models import JSON_OBJECT, Strict
from kg import jobs
from kg.rag.functions import invoke

router = APIRouter(prefix="/api/functions", tags=["functions"])


class InvokeBody(Strict):
    input: dict[str, Any]
    branch: str = Field(default="main", min_length=1, max_length=255)
    wait_for_completion: bool = True


@router.post("/{repo}/{name}/invoke", responses={200: {"description": "The function's output"},
                                             202: {"description": "Queued: `{job_id, state}`", "content": JSON_OBJECT}})
def invoke_function(repo: str, name: str, body: InvokeBody, services: ServicesDep, response: Response) -> dict:
    """Invoke ``search-documents``, ``ask``, ``graph-context`` or ``extract-entities`` on a
    branch: wait for its output, or (``wait_for_completion: false``)
    answer 202 with a job id to read at ``GET /api/jobs/{job_id}``."""
    if not body.wait_for_completion:
        job_id = jobs.submit(services, repo, name, body.input, branch=body.branch)
        response.status_code = 202
        response.headers["Location"] = f"/api/jobs/{job_id}"
        return {"job_id": job_id, "state": jobs.get(services, job_id)["state"]}
    return invoke(services, repo, name, body.input, branch=body.branch)
