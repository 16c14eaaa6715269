"""Jobs of asynchronous function invocations."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import CallerDep, ServicesDep
from api.guard import GuardedRoute
from kg.rag import function_jobs
from kg.types import Job

router = APIRouter(route_class=GuardedRoute, prefix="/api/jobs", tags=["jobs"])


@router.get("/{job_id}", response_model=Job)
def get_job(job_id: str, services: ServicesDep, caller: CallerDep) -> dict:
    """A job's state (``queued``, ``running``, ``succeeded``, ``failed``) and its output or error."""
    return function_jobs.get(services, caller, job_id)
