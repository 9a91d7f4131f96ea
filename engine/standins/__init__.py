"""Stand-ins for the expensive or external parts of a run, for the demo, tests and benchmarks.

- :mod:`engine.standins.scripted_llm`: an OpenAI-compatible model server on 127.0.0.1 that
  replays scripted turns (``scenarios/``); the demo's model and the annotator tests' models.
- :mod:`engine.standins.simulated`: instant simulated agents and graders (scheduler tests,
  scale benchmarks; ``agent = "simulated"`` / ``grading = "simulated"`` in a config).

The production path (scheduler, attempt runner, grading, sandbox, tasks) never imports this
package (an import-linter contract in ``pyproject.toml``); only the composition root,
:mod:`engine.factory`, picks a stand-in when an experiment config asks for one.
"""
