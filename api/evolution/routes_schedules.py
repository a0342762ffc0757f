"""Periodic improvement schedules (evolution/schedules.py): each run starts an evolution cycle of
kind ``periodic_improvement``; overlap policy SKIP."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse

from api.auth import OPERATOR_ERRORS, require_operator
from api.deps import Services, ServicesDep
from api.errors import ApiError, ErrorResponse, Responses
from api.evolution.schemas import ScheduleCreateRequest, ScheduleListResponse, ScheduleResponse
from api.paging import Cursor, Keyset, paged, text
from api.params import ScheduleIdPath
from evolution import schedules

router = APIRouter(prefix="/api/schedules", tags=["schedules"])
PAGES = Keyset("schedules", text(schedules.SCHEDULE_ID_PATTERN))  # (schedule_id,), ascending
ERRORS: Responses = {
    404: {"model": ErrorResponse, "description": "No schedule with that id"},
    422: {"model": ErrorResponse, "description": "Invalid fields (the detail names each one)"},
    503: {"model": ErrorResponse, "description": "Temporal unavailable"},
}


def _queue(services: Services) -> str:
    """Genesis' schedules are the ones starting cycles on this API's task queue (evolution/schedules.py)."""
    return services.settings.task_queue


async def _call(services: Services, action, *args, **kwargs) -> Any:
    client = await services.temporal()
    try:
        return await action(client, *args, **kwargs)
    except schedules.ScheduleNotFound as exc:
        raise ApiError(404, "SCHEDULE_NOT_FOUND", str(exc)) from exc
    except schedules.ScheduleExists as exc:
        raise ApiError(409, "SCHEDULE_EXISTS", str(exc)) from exc
    except schedules.ScheduleInvalid as exc:
        raise ApiError(422, "VALIDATION_ERROR", str(exc)) from exc


@router.post(
    "",
    status_code=201,
    response_model=ScheduleResponse,
    dependencies=[Depends(require_operator)],
    responses={**ERRORS, **OPERATOR_ERRORS, 409: {"model": ErrorResponse, "description": "The schedule_id is taken"}},
)
async def create_schedule(body: ScheduleCreateRequest, services: ServicesDep) -> JSONResponse:
    """Create a schedule that starts a periodic improvement cycle every ``interval_sec`` seconds."""
    settings = services.settings
    described = await _call(
        services,
        schedules.create,
        settings.task_queue,
        interval_s=body.interval_sec,
        schedule_id=body.schedule_id,
        paused=body.paused,
        note=body.note,
        min_interval_s=settings.schedule_min_interval_s,
    )
    return JSONResponse(described, status_code=201)


@router.get("", response_model=ScheduleListResponse, responses=paged(ERRORS))
async def list_schedules(
    request: Request,
    response: Response,
    services: ServicesDep,
    limit: int = Query(default=100, ge=1, le=500, description="At most this many schedules, by id"),
    cursor: Cursor = None,
) -> dict:
    """Genesis' periodic improvement schedules, by id."""
    after = PAGES.decode(cursor)
    found = await _call(services, schedules.list_all, _queue(services), after[0] if after else None, limit + 1)
    page, next_cursor = PAGES.page(request, response, found, limit, lambda schedule: (schedule["schedule_id"],))
    return {"schedules": page, "next_cursor": next_cursor}


@router.get("/{schedule_id}", response_model=ScheduleResponse, responses=ERRORS)
async def get_schedule(schedule_id: ScheduleIdPath, services: ServicesDep) -> dict:
    return await _call(services, schedules.describe, schedule_id, _queue(services))


@router.post(
    "/{schedule_id}/pause",
    response_model=ScheduleResponse,
    responses={**ERRORS, **OPERATOR_ERRORS},
    dependencies=[Depends(require_operator)],
)
async def pause_schedule(schedule_id: ScheduleIdPath, services: ServicesDep) -> dict:
    return await _call(services, schedules.pause, schedule_id, _queue(services))


@router.post(
    "/{schedule_id}/resume",
    response_model=ScheduleResponse,
    responses={**ERRORS, **OPERATOR_ERRORS},
    dependencies=[Depends(require_operator)],
)
async def resume_schedule(schedule_id: ScheduleIdPath, services: ServicesDep) -> dict:
    return await _call(services, schedules.resume, schedule_id, _queue(services))


@router.delete(
    "/{schedule_id}",
    response_model=ScheduleResponse,
    responses={**ERRORS, **OPERATOR_ERRORS},
    dependencies=[Depends(require_operator)],
)
async def delete_schedule(schedule_id: ScheduleIdPath, services: ServicesDep) -> dict:
    """Delete the schedule (cycles already running finish); answers its last description."""
    return await _call(services, schedules.delete, schedule_id, _queue(services))
