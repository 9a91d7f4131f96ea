"""Sandboxes for agent attempts: Harbor environment classes (default: a bubblewrap jail per
attempt, built with the standard-library jail library ``engine.sandbox.jail``)."""
