"""Subcommands of `mkb`: each module defines `register(subparsers)`."""

from app.commands.tui import default_command  # noqa: E402,F401  (plain `mkb` opens the TUI)
