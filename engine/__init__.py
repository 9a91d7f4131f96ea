"""Headless core: events, plan, scheduler, attempts, grading, transfer, analysis, annotation."""
