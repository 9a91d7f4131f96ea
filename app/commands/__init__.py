"""Subcommands of `mkb`: each module defines `register(subparsers)`."""
