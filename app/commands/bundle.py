"""`mkb bundle export|verify`: an experiment as one checked archive (docs/bundles.md)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from app.commands.db import add_db_argument


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bundle", help="export an experiment as a re-grade bundle, or verify one"
    )
    sub = parser.add_subparsers(dest="bundle_command", metavar="ACTION", required=True)
    export = sub.add_parser("export", help="write EXPERIMENT's bundle to --out FILE")
    add_db_argument(export)
    export.add_argument("experiment", metavar="EXPERIMENT", help="experiment id in the store")
    export.add_argument("--out", required=True, metavar="FILE", help="the bundle to write")
    export.add_argument(
        "--all",
        action="store_true",
        help="every graded submission too, not only the final evaluations",
    )
    export.add_argument("--json", action="store_true", help="print the result as JSON")
    export.set_defaults(func=run_export)
    verify = sub.add_parser("verify", help="check a bundle: every member against its manifest")
    verify.add_argument("file", metavar="FILE")
    verify.add_argument("--json", action="store_true", help="print the result as JSON")
    verify.set_defaults(func=run_verify)


def visible_secrets(dotenv: str | os.PathLike[str] = ".env") -> list[str]:
    """Every secret value this process can see: variables named like keys, and every value
    in ``.env`` (whatever its name)."""
    from app.dotenv import parse_dotenv
    from engine.bundle.secrets import secret_values

    try:
        values, _ = parse_dotenv(Path(dotenv).read_text(encoding="utf-8"), str(dotenv))
    except OSError:
        values = {}
    return secret_values(os.environ, values.values())


def run_export(args: argparse.Namespace) -> int:
    from app.commands.rubric import open_store_db
    from app.errors import UsageError
    from engine.bundle.export import ExportError, export_bundle
    from storage.sanitize import clean

    db = open_store_db(args.db, readonly=True)
    try:
        result = export_bundle(
            db, args.experiment, args.out, include_all=args.all, secret_values=visible_secrets()
        )
    except (ExportError, OSError) as exc:
        raise UsageError(str(exc)) from exc
    finally:
        db.conn.close()
    if args.json:
        print(json.dumps(clean(result.__dict__), indent=2))
        return 0
    print(
        clean(
            f"wrote {result.path}: {result.implementations} implementations, "
            f"{result.members} members, {result.size_bytes / 1e6:.2f} MB in "
            f"{result.seconds:.1f} s; sha256 {result.sha256}"
        )
    )
    if result.scrubbed:
        print(clean("left out of the config: " + ", ".join(result.scrubbed)))
    if result.redacted:
        print(clean("secret values replaced by [REDACTED] in: " + ", ".join(result.redacted)))
    return 0


def run_verify(args: argparse.Namespace) -> int:
    from engine.bundle.archive import BundleError
    from engine.bundle.content import load_bundle
    from storage.sanitize import clean

    try:
        bundle = load_bundle(args.file)
    except BundleError as exc:
        if args.json:
            print(
                json.dumps(
                    clean(
                        {
                            "ok": False,
                            "problems": [
                                {"member": p.member, "message": p.message} for p in exc.problems
                            ],
                        }
                    ),
                    indent=2,
                )
            )
        else:
            print(clean(str(exc)))
        return 1
    summary = {
        "ok": True,
        "sha256": bundle.sha256,
        "schema_version": bundle.manifest["schema_version"],
        "experiment": bundle.experiment_id,
        "attempts": len(bundle.attempts),
        "implementations": len(bundle.implementations),
        "problems": sorted(bundle.problems),
        "members": len(bundle.manifest["members"]) + 1,
        "redacted": bundle.manifest.get("redacted", []),
    }
    if args.json:
        print(json.dumps(clean(summary), indent=2))
    else:
        print(
            clean(
                f"bundle OK: {args.file}: experiment {bundle.experiment_id}, "
                f"{summary['attempts']} attempts, {summary['implementations']} "
                f"implementations, problems {', '.join(summary['problems'])}; "
                f"{summary['members']} members match the manifest "
                f"(schema {summary['schema_version']}); sha256 {bundle.sha256}"
            )
        )
    return 0
