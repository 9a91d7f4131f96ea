"""Third-party libraries kept off the network at start-up and out of the terminal.

litellm fetches its model price map from GitHub when imported; offline it retries for
seconds and prints warnings on every run. The CLI uses the map bundled with litellm
(``LITELLM_LOCAL_MODEL_COST_MAP=True``) unless the user set that variable (``False`` asks
for a fresh map). While a run or the TUI owns the terminal, warnings and library log records
go to ``mkb.log`` next to the database instead of the progress display.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, MutableMapping
from pathlib import Path

BUNDLED_COST_MAP = "LITELLM_LOCAL_MODEL_COST_MAP"
LOG_NAME = "mkb.log"
# loggers that print through handlers of their own (records logged to them directly)
OWN_HANDLER_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")


def use_bundled_model_costs(env: MutableMapping[str, str] = os.environ) -> None:
    """Have litellm read its bundled price map instead of downloading one (unless the user
    chose otherwise). Call before anything imports litellm."""
    env.setdefault(BUNDLED_COST_MAP, "True")


class _ToLogFile(logging.Filter):
    """On a logger: hand each record to the log file and stop it there, so the library's own
    terminal handlers (added before or after) never see it."""

    def __init__(self, handler: logging.Handler) -> None:
        super().__init__()
        self.handler = handler

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= self.handler.level:
            self.handler.handle(record)
        return False


@contextlib.contextmanager
def library_output_to_log(db_path: str | os.PathLike[str]) -> Iterator[Path]:
    """While inside: warnings and third-party log records (WARNING and up) go to ``mkb.log``
    beside the database, not to the terminal. Yields the log's path."""
    path = Path(db_path).parent / LOG_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8", delay=True)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    diverts = [(logging.getLogger(name), _ToLogFile(handler)) for name in OWN_HANDLER_LOGGERS]
    root = logging.getLogger()
    root.addHandler(handler)  # module loggers (harbor, httpx, ...) propagate here
    for logger, divert in diverts:
        logger.addFilter(divert)
    logging.captureWarnings(True)  # warnings.warn → the "py.warnings" logger → the log
    try:
        yield path
    finally:
        logging.captureWarnings(False)
        for logger, divert in diverts:
            logger.removeFilter(divert)
        root.removeHandler(handler)
        handler.close()
