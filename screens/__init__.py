"""Textual screens and widgets."""
