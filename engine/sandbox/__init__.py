"""Sandboxes for agent attempts: Harbor environment classes (default: Linux namespaces)."""
