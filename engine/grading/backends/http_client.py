"""The http backend: a client pool over several ``mkb grader serve`` hosts.

Each request goes to the least busy host (ties in turn); a transient failure (connection
error, timeout, HTTP 5xx/429, or an "error" verdict such as a grading worker that died) is
retried on the next host, up to ``tries`` attempts in all.

A request that names its slot (``GradeRequest.slot``, a paired job's: the ``Feedback.host``
of a grading this pool received) goes only to the host that answered for that slot, every
try; the service's local backend then waits for that slot. When that host fails every try the
feedback is an infrastructure error and the paired job moves on (``engine/paired_repeats.py``).
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import aiohttp

from engine.grading.admission import admit, retryable
from engine.grading.api import Feedback, GradeRequest
from engine.grading.backends.card_memory import MEMORY_UNFIT
from engine.grading.verdict import BadRequest, InfrastructureError

RETRYABLE_STATUS = {429, 500, 502, 503, 504}


class HttpBackend:
    """Grades through remote grading services."""

    name = "http"

    def __init__(
        self,
        urls: list[str],
        token: str | None = None,
        tries: int = 3,
        timeout_s: float = 3600.0,
        connect_timeout_s: float = 10.0,
        backoff_s: float = 0.5,
    ) -> None:
        if not urls:
            raise ValueError("the http backend needs at least one grader URL")
        self.urls = [u.rstrip("/") for u in urls]
        self.token = token
        self.tries = max(1, tries)
        self.timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=connect_timeout_s)
        self.backoff_s = backoff_s
        self.in_flight = dict.fromkeys(self.urls, 0)
        self.failures = dict.fromkeys(self.urls, 0)
        self.slot_urls: dict[str, str] = {}  # Feedback.host -> the url that answered for it
        self._turn = itertools.count()
        self._session: aiohttp.ClientSession | None = None

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        return self._session

    def order(self, request: GradeRequest | None = None) -> list[str]:
        """Hosts to try, least busy (and least failing) first, rotating among equals; only
        the slot's host for a request that names a slot this pool has seen."""
        if request is not None and request.slot in self.slot_urls:
            return [self.slot_urls[request.slot]]
        turn = next(self._turn)
        rotated = self.urls[turn % len(self.urls) :] + self.urls[: turn % len(self.urls)]
        return sorted(rotated, key=lambda u: (self.in_flight[u], self.failures[u]))

    async def grade(self, request: GradeRequest) -> Feedback:
        hosts = self.order(request)
        problems: list[str] = []
        unfit: Feedback | None = None
        for attempt in range(self.tries):
            url = hosts[attempt % len(hosts)]
            if attempt:
                await asyncio.sleep(self.backoff_s * attempt)
            self.in_flight[url] += 1
            try:
                feedback, transient = await self._post(url, request)
            except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
                feedback, transient = None, f"{type(exc).__name__}: {exc}"
            finally:
                self.in_flight[url] -= 1
            if transient is None and feedback is not None:
                self.failures[url] = 0
                if feedback.host:
                    self.slot_urls[feedback.host] = url
                return feedback
            self.failures[url] += 1
            problems.append(f"{url}: {transient}")
            if feedback is not None and not _retryable(feedback):
                return feedback
            if feedback is not None and feedback.reason == MEMORY_UNFIT:
                unfit = feedback  # another host's card may be larger: tried there too
        if unfit is not None:  # no host that answered has a card its plan fits
            return unfit
        return Feedback.decided(
            request,
            InfrastructureError(f"grading failed after {self.tries} tries: " + "; ".join(problems)),
        )

    async def _post(self, url: str, request: GradeRequest) -> tuple[Feedback | None, str | None]:
        """(feedback, None) on an answer; (feedback or None, why) on a transient failure."""
        session = self._session_now()
        async with session.post(
            f"{url}/grade", json=request.to_dict(), headers=self._headers()
        ) as resp:
            if resp.status in RETRYABLE_STATUS:
                return None, f"HTTP {resp.status}"
            if resp.status != 200:
                text = await resp.text()
                fb = Feedback.decided(
                    request, BadRequest(f"grader answered HTTP {resp.status}: {text}")
                )
                return fb, f"HTTP {resp.status}"
            feedback = Feedback.from_dict(await resp.json())
        if feedback.verdict == "error" and _retryable(feedback):
            return feedback, f"error verdict: {feedback.message}"
        return feedback, None

    async def status(self) -> dict[str, Any]:
        """Each host's /status answer (or the error reaching it)."""
        session = self._session_now()

        async def one(url: str) -> tuple[str, Any]:
            try:
                async with session.get(f"{url}/status", headers=self._headers()) as resp:
                    return url, await resp.json() if resp.status == 200 else {
                        "error": f"HTTP {resp.status}"
                    }
            except (aiohttp.ClientError, TimeoutError) as exc:
                return url, {"error": f"{type(exc).__name__}: {exc}"}

        return dict(await asyncio.gather(*(one(u) for u in self.urls)))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _retryable(feedback: Feedback) -> bool:
    """Transient infrastructure errors are retried elsewhere; verdicts on the submission and
    deterministic errors (the judge out of memory, ``usage``) are final
    (``engine/grading/admission.py``)."""
    return retryable(admit(feedback))
