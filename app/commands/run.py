"""`mkb run CONFIG`: plan and run an experiment (resumable; rerun to converge)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from typing import Any

from app.commands.db import add_db_argument


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("run", help="run an experiment config (resumable)")
    parser.add_argument("config", help="experiment TOML file")
    add_db_argument(parser)
    parser.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    parser.add_argument("--problems", help="only these problems (comma-separated ids/globs)")
    parser.add_argument("--family", help="only problems of this family")
    parser.add_argument("--models", help="only these models (comma-separated names)")
    parser.add_argument("--rerun-stale", action="store_true",
                        help="rerun attempts whose task build or attached skill changed")
    parser.add_argument("--json", action="store_true", help="stream engine events as JSON lines")
    add_unsafe_no_jail_argument(parser)
    parser.set_defaults(func=run)


def add_unsafe_no_jail_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--unsafe-no-jail", action="store_true",
        help="UNSAFE: run local sandboxes without the bubblewrap agent jail (agents run as "
             "root and see the whole host); recorded on each attempt")


def unsafe_no_jail(config: Any, args: argparse.Namespace) -> Any:
    """The config with ``--unsafe-no-jail`` applied (local sandboxes only)."""
    from app.errors import UsageError

    if not getattr(args, "unsafe_no_jail", False):
        return config
    if config.sandbox != "local":
        raise UsageError(f"--unsafe-no-jail applies to the local sandbox, not {config.sandbox!r}")
    print("WARNING: --unsafe-no-jail: agents run as root without the jail and can read and "
          "write the whole host (the project, the store, .env keys)", file=sys.stderr)
    return dataclasses.replace(config, unsafe_no_jail=True)


def apply_overrides(config: Any, args: argparse.Namespace) -> Any:
    """Narrow a config with --problems / --family / --models."""
    from app.errors import UsageError

    changes: dict[str, Any] = {}
    if args.problems:
        changes["problems"] = tuple(p.strip() for p in args.problems.split(",") if p.strip())
    if args.family:
        changes["families"] = (args.family,)
    if args.models:
        wanted = [m.strip() for m in args.models.split(",") if m.strip()]
        unknown = [m for m in wanted if m not in {x.name for x in config.models}]
        if unknown:
            raise UsageError(f"--models: not in the config: {', '.join(unknown)}")
        changes["models"] = tuple(m for m in config.models if m.name in wanted)
    return dataclasses.replace(config, **changes) if changes else config


def run(args: argparse.Namespace) -> int:
    from app.errors import UsageError
    from engine.config import ConfigError, load_config, validate_problems
    from engine.plan import build_plan, describe

    try:
        config = apply_overrides(load_config(args.config, check_problems=False), args)
        config = unsafe_no_jail(config, args)
        validate_problems(config)
        plan = build_plan(config)
    except (ConfigError, KeyError) as exc:
        raise UsageError(str(exc.args[0] if isinstance(exc, KeyError) else exc)) from exc
    if args.dry_run:
        print(describe(plan))
        return 0
    from engine.environments import check_experiment, format_problems

    missing = check_experiment(config)
    if missing:
        raise UsageError("this config cannot run here:\n" + format_problems(missing))
    return execute(config, args.db, rerun_stale=args.rerun_stale, json_events=args.json)


def execute(config: Any, db: str | None, *, rerun_stale: bool = False,
            json_events: bool = False) -> int:
    """Run a validated config headlessly; prints a summary; returns an exit code."""
    from app.errors import UsageError
    from app.third_party import library_output_to_log
    from storage.db import StorageError
    from storage.store import Store

    try:
        store = Store(db)
    except StorageError as exc:
        raise UsageError(str(exc)) from exc
    with library_output_to_log(store.path):  # library warnings: not over the progress
        return _execute(store, config, rerun_stale=rerun_stale, json_events=json_events)


def _execute(store: Any, config: Any, *, rerun_stale: bool, json_events: bool) -> int:
    from app.errors import UsageError
    from app.progress import JsonEventStream, ProgressDisplay
    from engine.convergence import PreviewMixError
    from engine.events import EventBus, FleetStatus
    from engine.factory import make_backend, make_runner
    from engine.scheduler import Engine
    from problems.targets import TargetMismatchError
    from storage.run_locks import ExperimentBusyError

    bus = EventBus()
    backend = make_backend(config)
    runner = make_runner(config)
    preview = bool(getattr(backend, "preview", False)) or config.grading == "simulated"
    engine = Engine(store, config, runner, backend, bus=bus, rerun_stale=rerun_stale,
                    preview=preview)

    async def main() -> Any:
        monitor = None
        if hasattr(backend, "status") and config.grading == "http":
            from engine.grading.backends.fleet import FleetMonitor

            def publish(snapshot: Any) -> None:  # queue depth and GPU utilisation
                bus.notify(FleetStatus(config.id, **snapshot.to_dict()))

            monitor = FleetMonitor(backend, 5.0, publish)  # type: ignore[arg-type]
            monitor.start()
        if config.grading == "ray":  # nodes, GPUs, graders busy, queue depth, restarts
            from engine.events import RayStatus
            from engine.grading.backends.ray import RayUnavailable

            backend.status_sink = lambda status: bus.notify(  # type: ignore[attr-defined]
                RayStatus.from_status(config.id, status)
            )
            try:  # connect before the first attempt: a wrong address or token stops here
                await backend.start()  # type: ignore[attr-defined]
            except RayUnavailable as exc:
                await backend.close()
                raise UsageError(str(exc)) from exc
        try:
            return await engine.run()
        finally:
            if monitor is not None:
                await monitor.stop()
            await backend.close()

    try:
        if json_events:
            JsonEventStream(bus)
            summary = asyncio.run(main())
        else:
            with ProgressDisplay(bus, len(engine.plan.nodes), config.name):
                summary = asyncio.run(main())
    except KeyboardInterrupt:
        print("interrupted: running attempts were recorded as interrupted; rerun to resume",
              file=sys.stderr)
        store.close()
        return 130
    except (ExperimentBusyError, TargetMismatchError, PreviewMixError) as exc:  # nothing changed
        store.close()
        raise UsageError(str(exc)) from exc
    store.close()
    preview = preview or engine.preview
    report = dataclasses.asdict(summary)
    if json_events:
        print(json.dumps({"kind": "summary", **report}))
    else:
        label = " (PREVIEW: CPU grading, not scored)" if preview else ""
        print(f"experiment {summary.experiment_id}{label}: {summary.attempts} attempts "
              f"({summary.reused} reused, {summary.ran} ran, {summary.skipped} skipped), "
              f"{summary.comparisons_resolved} comparisons resolved")
        print("states: " + ", ".join(f"{k}={v}" for k, v in sorted(summary.by_state.items())))
        if summary.ungraded:  # the grader's failures: never the agents' results
            print(f"ungraded (grader's fault): {sum(summary.ungraded.values())}, by reason: "
                  + ", ".join(f"{k} {v}" for k, v in summary.ungraded.items()))
        if summary.stale:
            verb = "rerun" if rerun_stale else "kept (use --rerun-stale to rerun)"
            print(f"stale attempts {verb}: {len(summary.stale)}")
    return 130 if summary.interrupted else 0
