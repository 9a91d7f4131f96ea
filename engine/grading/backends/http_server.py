"""The grading service (``mkb grader serve``): a local backend behind an aiohttp API.

Endpoints: ``GET /health`` (no auth: liveness only), ``GET /status`` and ``POST /grade``
(bearer token). ``/grade`` takes a :class:`GradeRequest` as JSON and answers the
:class:`Feedback`; requests queue for the host's GPUs (one evaluation per GPU at a time).
When more than ``max_queue`` requests already wait, it answers 503 so a client pool can try
another host.

Each feedback's ``host`` names the grading slot with this service's port
(``hostname:gpu0@8765``): several services on one machine (a loopback fleet) hold distinct
slots, and a request naming its slot (``GradeRequest.slot``, a paired job's) is placed on
that slot of this service (:func:`service_slot`).
"""

from __future__ import annotations

import dataclasses
import hmac
import ipaddress
from typing import Any

from aiohttp import web

from engine.grading.api import GradeRequest

BACKEND_KEY: web.AppKey[Any] = web.AppKey("backend", object)
MAX_BODY_BYTES = 2 * 1024 * 1024


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def service_slot(host: str, port: int | None) -> str:
    """A slot as this service names it: ``hostname:label@port`` (unchanged without a port)."""
    return f"{host}@{port}" if host and port else host


def local_slot(slot: str, port: int | None) -> str:
    """A request's slot as this service's backend knows it (the port suffix removed)."""
    suffix = f"@{port}"
    return slot[: -len(suffix)] if port and slot.endswith(suffix) else slot


def _port(request: web.Request) -> int | None:
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    return int(sockname[1]) if isinstance(sockname, tuple) and len(sockname) >= 2 else None


def create_app(backend: Any, token: str | None, max_queue: int | None = None) -> web.Application:
    """The aiohttp application around ``backend`` (anything with grade/status/close)."""

    @web.middleware
    async def auth(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path != "/health" and token:
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return web.json_response({"error": "unauthorized"}, status=401)
        return await handler(request)

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def status(request: web.Request) -> web.Response:
        return web.json_response(request.app[BACKEND_KEY].status())

    async def grade(request: web.Request) -> web.Response:
        backend = request.app[BACKEND_KEY]
        port = _port(request)
        try:
            body = await request.json()
            grade_request = GradeRequest.from_dict(body)
            if not isinstance(grade_request.source, str) or not isinstance(grade_request.slot, str):
                raise TypeError("source and slot must be strings")
        except (ValueError, TypeError, KeyError) as exc:
            return web.json_response({"error": f"bad request: {exc}"}, status=400)
        if max_queue is not None and backend.status().get("queued", 0) >= max_queue:
            return web.json_response({"error": "queue full"}, status=503)
        slot = local_slot(grade_request.slot, port)
        feedback = await backend.grade(dataclasses.replace(grade_request, slot=slot))
        feedback.host = service_slot(feedback.host, port)
        return web.json_response(feedback.to_dict())

    async def on_cleanup(app: web.Application) -> None:
        await app[BACKEND_KEY].close()

    app = web.Application(middlewares=[auth], client_max_size=MAX_BODY_BYTES)
    app[BACKEND_KEY] = backend
    app.router.add_get("/health", health)
    app.router.add_get("/status", status)
    app.router.add_post("/grade", grade)
    app.on_cleanup.append(on_cleanup)
    return app


async def start_server(
    backend: Any, host: str, port: int, token: str | None, max_queue: int | None = None
) -> tuple[web.AppRunner, int]:
    """Start serving (non-blocking); returns the runner and the bound port."""
    if not token and not is_loopback(host):
        raise ValueError("a token is required to listen beyond the loopback interface")
    runner = web.AppRunner(create_app(backend, token, max_queue), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    addresses = runner.addresses
    bound = int(addresses[0][1]) if addresses else port
    return runner, bound
