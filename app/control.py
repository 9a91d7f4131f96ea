"""The TUI's side of supervision: write operators' commands and report the engine's answer.

Every TUI writes commands the same way, whether it runs the engine or is attached to a run
another process holds (``mkb tui --attach``, the browser view): one short write transaction
on its own connection (``storage/controls.py``), then the answer is read back until the
engine has applied or refused it. The browser view acts only when it was started with
``mkb tui --serve PORT --control`` and the tab gives that token; an action without it is
refused and the refusal recorded like any command.
"""

from __future__ import annotations

import asyncio
import getpass
import hashlib
import hmac
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storage import controls, queries
from storage.db import immediate, open_db
from storage.sanitize import clean_text

TOKEN_ENV = "MKB_CONTROL_TOKEN_SHA256"  # the browser view's token, hashed, for its tabs
WAIT_S = 3.0  # how long a TUI waits for the engine's answer before saying it is pending
BROWSER_READ_ONLY = (
    "refused: this browser view is read-only (start it with `mkb tui --serve PORT --control` "
    "and give the token it prints)"
)
BAD_TOKEN = "refused: wrong control token"


def user() -> str:
    """Who acts from a terminal: the OS user."""
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name in some containers
        return "human"


def new_token() -> tuple[str, str]:
    """A control token for the browser view and its sha256 (what the served tabs get)."""
    token = secrets.token_hex(16)  # easy to type and paste: 128 bits
    return token, hashlib.sha256(token.encode()).hexdigest()


@dataclass
class ControlClient:
    """One TUI's writer of commands: who it is and, in the browser view, its token check."""

    db_path: Path
    browser: bool = False
    token_sha: str | None = None
    session: str = field(default_factory=lambda: secrets.token_hex(4))
    unlocked: bool = False  # the browser tab gave the right token once

    @classmethod
    def for_app(cls, db_path: Path, *, browser: bool) -> ControlClient:
        return cls(db_path, browser=browser, token_sha=os.environ.get(TOKEN_ENV) or None)

    @property
    def actor(self) -> str:
        return f"browser session {self.session}" if self.browser else user()

    @property
    def mode(self) -> str:
        """What an attached view may do, for its title."""
        if not self.browser:
            return "attached: actions go to the run's engine"
        return "attached, read-only" if self.token_sha is None else "attached, token to act"

    @property
    def asks_token(self) -> bool:
        return self.browser and self.token_sha is not None and not self.unlocked

    def refusal(self, token: str) -> str:
        """Why this tab may not act ("" when it may)."""
        if not self.browser or self.unlocked:
            return ""
        if self.token_sha is None:
            return BROWSER_READ_ONLY
        given = hashlib.sha256(token.encode()).hexdigest()
        if not hmac.compare_digest(given, self.token_sha):
            return BAD_TOKEN
        self.unlocked = True
        return ""

    def _submit(self, experiment_id: str | None, action: str, attempt_id: int | None,
                reason: str, args: dict[str, Any], refuse: str) -> controls.Command:
        db = open_db(self.db_path)
        try:
            with immediate(db):
                if attempt_id is not None:  # the attempt's experiment, whichever is shown
                    row = queries.attempt(db, attempt_id)
                    experiment_id = row.experiment_id if row else experiment_id
                if experiment_id is None:
                    raise controls.ControlError("no experiment is selected")
                return controls.submit(db, experiment_id, action, actor=self.actor,
                                       attempt_id=attempt_id, reason=reason, args=args,
                                       refuse=refuse)
        finally:
            db.conn.close()

    def _read(self, command_id: int) -> controls.Command:
        db = open_db(self.db_path, readonly=True)
        try:
            return controls.command(db, command_id)
        finally:
            db.conn.close()

    async def act(self, experiment_id: str | None, action: str, show: Callable[..., None],
                  attempt_id: int | None = None, *, reason: str = "",
                  args: dict[str, Any] | None = None, token: str = "") -> str:
        """Write one command and wait (``WAIT_S``) for its answer, shown with ``show`` (the
        App's toast); returns that line."""
        line = await self._act(experiment_id, action, attempt_id, reason, args, token)
        show(line, title=action, severity="warning" if "refused" in line else "information",
             timeout=8)
        return line

    async def _act(self, experiment_id: str | None, action: str, attempt_id: int | None,
                   reason: str, args: dict[str, Any] | None, token: str) -> str:
        refuse = self.refusal(token)
        try:
            command = await asyncio.to_thread(self._submit, experiment_id, action, attempt_id,
                                              reason, dict(args or {}), refuse)
        except controls.ControlError as exc:
            return f"not sent: {exc}"
        deadline = time.monotonic() + WAIT_S
        while command.state in ("pending", "applying") and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            command = await asyncio.to_thread(self._read, command.id)
        line = clean_text(command.describe())
        if command.state in ("pending", "applying"):
            line += " (the engine has not answered yet)"
        return line
