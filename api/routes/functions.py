"""Function invocation: one documented operation per function, with the
function's own input, and the generic ``{name}`` route for the others (404)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Response

from api.deps import CallerDep, RepoP, ServicesDep
from api.guard import GuardedRoute
from kg.context import run
from kg.rag import function_jobs
from kg.rag.functions import invoke
from kg.types import FunctionOutput, InvokeBody, JobAccepted
from kg.types.functions import FUNCTION_INPUTS, INVOKE_BODIES

router = APIRouter(route_class=GuardedRoute, prefix="/api/functions", tags=["functions"])

_ANSWERS: dict[int | str, dict[str, Any]] = {
    200: {"description": "The function's output"},
    202: {"description": "Queued: follow the job at its `Location`", "model": JobAccepted}}


def _invoke(services: Any, caller: Any, repo: str, name: str, body: InvokeBody) -> Any:
    """Wait for the function's output, or (``wait_for_completion: false``) answer 202 with a job."""
    if not body.wait_for_completion:
        job_id = run(services, caller, function_jobs.submit, repo, name, body.input, branch=body.branch)
        accepted = JobAccepted(job_id=job_id, state=function_jobs.get(services, caller, job_id)["state"])
        # Not the 200 model: answered as is, validated by the model's construction.
        return Response(accepted.model_dump_json(), status_code=202, media_type="application/json",
                        headers={"Location": f"/api/jobs/{job_id}"})
    return invoke(services, caller, repo, name, body.input, branch=body.branch)


def _route(name: str, model: type) -> Callable[..., Any]:
    """The operation of one function: its body (:data:`kg.types.functions.INVOKE_BODIES`) with
    ``input`` documented as ``model``."""
    title = "".join(part.capitalize() for part in name.split("-"))
    body_model = INVOKE_BODIES[name]

    def invoke_one(repo: RepoP, body: InvokeBody, services: ServicesDep, caller: CallerDep) -> Any:
        return _invoke(services, caller, repo, name, body)

    invoke_one.__annotations__["body"] = body_model  # a class made here, not a name to resolve
    invoke_one.__name__ = f"invoke_{title.lower()}"
    invoke_one.__doc__ = (f"Invoke ``{name}`` on a branch: wait for its output, or (``wait_for_completion: "
                          "false``) answer 202 with a job id to read at ``GET /api/jobs/{job_id}``.\n\n"
                          f"{(model.__doc__ or '').strip()}")
    return invoke_one


for _name, _model in FUNCTION_INPUTS.items():
    router.post(f"/{{repo}}/{_name}/invoke", response_model=FunctionOutput, response_model_exclude_unset=True,
                responses=_ANSWERS, name=f"invoke-{_name}")(_route(_name, _model))


@router.post("/{repo}/{name}/invoke", response_model=FunctionOutput, response_model_exclude_unset=True,
             responses=_ANSWERS, include_in_schema=False)
def invoke_function(repo: RepoP, name: str, body: InvokeBody, services: ServicesDep, caller: CallerDep) -> Any:
    """Any other name: not a function (404, naming the functions there are)."""
    return _invoke(services, caller, repo, name, body)
