"""The engine side of the submission mailbox: poll, grade, answer, watch the skill, collect.

Everything goes through Harbor's environment API (``exec``, ``upload_file``,
``download_file``), so the mailbox works for any sandbox. One poll is one ``exec`` that lists
the outbox and rejected folders (type, size, name) and stats SKILL.md.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harbor.environments.base import BaseEnvironment

from engine.attempts.feedback_text import agent_ok, format_feedback
from engine.attempts.observer import AttemptObserver
from engine.attempts.spec import AttemptId
from engine.grading.api import MAX_SOURCE_BYTES, GradeRequest, GradingBackend
from engine.retry import RetryPolicy
from engine.tasks.instruction import SKILL_FILE, SOLUTION_FILE, WORKDIR
from engine.tasks.submit_script import INBOX, MAILBOX, OUTBOX, REJECTED, TAKEN

EventSink = Callable[[dict[str, Any]], Awaitable[None]]
SEPARATOR = "@@mkb@@"


@dataclass
class Collected:
    """What was collected from a sandbox at the end of an attempt."""

    source: str | None
    skill: str | None
    source_problem: str | None = None  # why the source could not be used, if so


class Mailbox:
    """Serves one sandbox's submissions for one try of an attempt."""

    def __init__(
        self,
        env: BaseEnvironment,
        *,
        attempt_id: AttemptId,
        problem_id: str,
        dsl: str,
        backend: GradingBackend,
        observer: AttemptObserver,
        emit: EventSink,
        max_submissions: int,
        grading_device: str = "auto",
        retry: RetryPolicy | None = None,
        poll_interval_s: float = 0.5,
        limits: Any = None,
    ) -> None:
        self.env = env
        self.attempt_id = attempt_id
        self.problem_id = problem_id
        self.dsl = dsl
        self.backend = backend
        self.observer = observer
        self.emit = emit
        self._max_submissions = max_submissions
        self._limits = limits  # the attempt's spec: an operator's extend raises its limit
        self.grading_device = grading_device
        self.retry = retry or RetryPolicy()  # graders' infrastructure errors are tried again
        self.poll_interval_s = poll_interval_s
        self.used = 0
        self.seen: set[str] = set()
        self.skill_stamp = ""
        self.skill_text: str | None = None
        self._scratch = Path(tempfile.mkdtemp(prefix="mkb-mailbox-"))

    @property
    def max_submissions(self) -> int:
        """The attempt's submission limit, read live (``mkb attempt extend``)."""
        return int(getattr(self._limits, "max_submissions", self._max_submissions))

    def close(self) -> None:
        """Remove the local scratch folder."""
        shutil.rmtree(self._scratch, ignore_errors=True)

    async def prepare(self) -> None:
        folders = " ".join(shlex.quote(p) for p in (OUTBOX, INBOX, REJECTED, TAKEN))
        result = await self.env.exec(f"mkdir -p {folders}", timeout_sec=30)
        if result.return_code != 0:
            raise RuntimeError(f"could not create the mailbox: {result.stderr}")

    async def run(self) -> None:
        """Poll until cancelled; a failing poll is reported and retried, never fatal."""
        failures = 0
        while True:
            try:
                await self.poll_once()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the sandbox may be going away
                failures += 1
                if failures in (1, 10, 100):
                    await self.emit(
                        {"kind": "mailbox_error", "message": f"{type(exc).__name__}: {exc}"}
                    )
            await asyncio.sleep(self.poll_interval_s)

    async def report_unprocessed(self) -> None:
        """At the end: record submissions still waiting in the outbox (they are not graded)."""
        result = await self.env.exec(
            f"cd {shlex.quote(MAILBOX)} && find outbox -mindepth 1 -maxdepth 1 -name '*.py'",
            timeout_sec=30,
        )
        for path in sorted((result.stdout or "").split()):
            if path not in self.seen:
                self.seen.add(path)
                await self.emit(
                    {
                        "kind": "submission_abandoned",
                        "id": Path(path).stem,
                        "message": "submitted as the attempt ended; not graded",
                    }
                )

    async def poll_once(self) -> None:
        skill = shlex.quote(f"{WORKDIR}/{SKILL_FILE}")
        command = (
            f"cd {shlex.quote(MAILBOX)} && find outbox rejected -mindepth 1 -maxdepth 1 "
            f"\\( -name '*.py' -o -name '*.json' \\) -printf '%y %s %p\\n' 2>/dev/null; "
            f"echo {SEPARATOR}; stat -L -c '%Y.%s' {skill} 2>/dev/null || true"
        )
        result = await self.env.exec(command, timeout_sec=30)
        listing, _, stamp = (result.stdout or "").partition(SEPARATOR)
        entries = []
        for line in listing.splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3 and parts[2] not in self.seen:
                entries.append((parts[2], parts[0], int(parts[1])))
        for path, kind, size in sorted(entries, key=lambda e: Path(e[0]).name):
            self.seen.add(path)
            if path.startswith("rejected/"):
                await self._handle_rejection(path)
            elif path.endswith(".py"):
                await self._handle_submission(path, kind, size)
        stamp = stamp.strip()
        if stamp and stamp != self.skill_stamp:
            self.skill_stamp = stamp
            text = await self.read_text(f"{WORKDIR}/{SKILL_FILE}", MAX_SOURCE_BYTES)
            if text is not None and text != self.skill_text:
                self.skill_text = text
                await self.observer.skill_updated(self.attempt_id, text)

    async def read_text(self, sandbox_path: str, limit: int) -> str | None:
        """Download a small text file from the sandbox (None when absent or unreadable)."""
        local = self._scratch / f"dl-{time.monotonic_ns()}"
        try:
            await self.env.download_file(sandbox_path, local)
            data = local.read_bytes()
        except Exception:  # noqa: BLE001 - absent or vanished file
            return None
        finally:
            local.unlink(missing_ok=True)
        return data[:limit].decode("utf-8", errors="replace")

    async def _move_to_taken(self, path: str) -> None:
        src = shlex.quote(f"{MAILBOX}/{path}")
        await self.env.exec(f"mv -f {src} {shlex.quote(TAKEN)}/ 2>/dev/null || true")

    async def _answer(self, sub_id: str, reply: dict[str, Any]) -> None:
        local = self._scratch / f"{sub_id}.json"
        local.write_text(json.dumps(reply))
        part = f"{INBOX}/{sub_id}.part"
        await self.env.upload_file(local, part)
        final = f"{INBOX}/{sub_id}.json"
        await self.env.exec(f"mv -f {shlex.quote(part)} {shlex.quote(final)}")
        local.unlink(missing_ok=True)

    async def _handle_rejection(self, path: str) -> None:
        raw = await self.read_text(f"{MAILBOX}/{path}", 64 * 1024)
        try:
            data = json.loads(raw or "{}")
        except json.JSONDecodeError:
            data = {"reason": "unreadable", "detail": raw or ""}
        await self._move_to_taken(path)
        reason, detail = str(data.get("reason", "unknown")), str(data.get("detail", ""))
        await self.observer.submission_rejected(self.attempt_id, reason, detail)

    async def _refuse(self, sub_id: str, path: str, reason: str, detail: str) -> None:
        await self._move_to_taken(path)
        await self.observer.submission_rejected(self.attempt_id, reason, detail)
        await self._answer(
            sub_id, {"status": "refused", "ok": False, "reason": reason, "text": detail}
        )

    async def _handle_submission(self, path: str, kind: str, size: int) -> None:
        sub_id = Path(path).stem
        if kind != "f":
            await self._refuse(sub_id, path, "not_a_file", "the submission is not a regular file")
            return
        if size > MAX_SOURCE_BYTES:
            detail = f"the submission has {size} bytes; the limit is {MAX_SOURCE_BYTES}"
            await self._refuse(sub_id, path, "too_large", detail)
            return
        if self.used >= self.max_submissions:
            detail = (
                f"Refused: all {self.max_submissions} submissions of this attempt are used; "
                "no more feedback is available. Your final solution.py will still be graded."
            )
            await self._refuse(sub_id, path, "limit", detail)
            return
        local = self._scratch / f"{sub_id}.py"
        try:
            await self.env.download_file(f"{MAILBOX}/{path}", local)
            source = local.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            await self._refuse(sub_id, path, "not_text", "the submission is not UTF-8 text")
            return
        finally:
            local.unlink(missing_ok=True)
        await self._move_to_taken(path)
        self.used += 1
        n = self.used
        await self.observer.submission_received(self.attempt_id, n, source)
        request = GradeRequest(
            problem_id=self.problem_id,
            dsl=self.dsl,
            source=source,
            device=self.grading_device,
            request_id=f"{self.attempt_id}-s{n}",
            purpose="submission",
        )
        try:
            feedback = await self.retry.grade(self.backend, request, self.emit)
        except asyncio.CancelledError:
            await self.emit(
                {
                    "kind": "submission_abandoned",
                    "n": n,
                    "message": "the attempt ended while this submission was being graded",
                }
            )
            raise
        if feedback.verdict == "error":
            self.used -= 1  # an infrastructure failure does not use up a submission
        await self.observer.feedback_returned(self.attempt_id, n, feedback)
        await self._answer(
            sub_id,
            {
                "status": "graded",
                "n": n,
                "ok": agent_ok(feedback),
                "text": format_feedback(feedback, n, self.max_submissions),
                "feedback": feedback.to_dict(),
            },
        )

    async def collect(self) -> Collected:
        """Read the final implementation and skill from the sandbox."""
        problem = None
        stat = await self.env.exec(
            f"stat -c '%F %s' {shlex.quote(f'{WORKDIR}/{SOLUTION_FILE}')} 2>/dev/null",
            timeout_sec=30,
        )
        source = None
        if stat.return_code != 0 or not (stat.stdout or "").strip():
            problem = "no solution.py in the workdir"
        else:
            kind, _, size = (stat.stdout or "").strip().rpartition(" ")
            if kind != "regular file" and kind != "regular empty file":
                problem = f"solution.py is a {kind}, not a regular file"
            elif int(size) > MAX_SOURCE_BYTES:
                problem = f"solution.py has {size} bytes; the limit is {MAX_SOURCE_BYTES}"
            else:
                source = await self.read_text(f"{WORKDIR}/{SOLUTION_FILE}", MAX_SOURCE_BYTES)
                if source is None:
                    problem = "solution.py could not be read"
        skill = await self.read_text(f"{WORKDIR}/{SKILL_FILE}", MAX_SOURCE_BYTES)
        if skill is not None and skill != self.skill_text:
            self.skill_text = skill
            await self.observer.skill_updated(self.attempt_id, skill)
        return Collected(source=source, skill=skill, source_problem=problem)
