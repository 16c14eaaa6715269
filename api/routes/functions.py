"""Function invocation (API.md, "Functions")."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from api.deps import CallerDep, RepoP, ServicesDep
from api.guard import GuardedRoute
from kg.context import run
from kg.rag import function_jobs
from kg.rag.functions import invoke
from kg.types import FunctionOutput, InvokeBody, JobAccepted

router = APIRouter(route_class=GuardedRoute, prefix="/api/functions", tags=["functions"])



@router.post("/{repo}/{name}/invoke", response_model=FunctionOutput, response_model_exclude_unset=True,
             responses={200: {"description": "The function's output"},
                        202: {"description": "Queued: follow the job at its `Location`", "model": JobAccepted}})
def invoke_function(repo: RepoP, name: str, body: InvokeBody, services: ServicesDep, caller: CallerDep) -> Any:
    """Invoke ``search-documents``, ``ask``, ``graph-context``, ``extract-entities`` or
    ``research-assistant`` on a branch: wait for its output, or (``wait_for_completion: false``)
    answer 202 with a job id to read at ``GET /api/jobs/{job_id}``."""
    if not body.wait_for_completion:
        job_id = run(services, caller, function_jobs.submit, repo, name, body.input, branch=body.branch)
        accepted = JobAccepted(job_id=job_id, state=function_jobs.get(services, caller, job_id)["state"])
        # Not the 200 model: answered as is, validated by the model's construction.
        return Response(accepted.model_dump_json(), status_code=202, media_type="application/json",
                        headers={"Location": f"/api/jobs/{job_id}"})
    return invoke(services, caller, repo, name, body.input, branch=body.branch)
