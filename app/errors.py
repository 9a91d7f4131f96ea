"""Errors the command modules raise and the dispatcher (:mod:`app.cli`) reports.

It lives below both so commands never import the dispatcher that imports them.
"""

from __future__ import annotations


class UsageError(Exception):
    """Bad arguments or input that the user must fix; printed without a traceback (exit 2)."""
