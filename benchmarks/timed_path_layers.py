"""The timed path one layer at a time: where a small call's host time goes between a plain
process and the full grader.

    PYTHONPATH=. python3 benchmarks/timed_path_layers.py OUT.jsonl [--device cpu|cuda]
        [--file F] [--problem pNN --dsl cute|tirx] [--rounds 3] [--calls 100]
        [--layers plain,runner,...] [--placement auto|off]

The same solve on the same inputs (``--file``: by default p28 in plain torch on a CPU, p28's
CuTe solution on a GPU; the problem's smoke draws on a CPU, full ones on a GPU) is called
``--calls`` times (after 10 untimed) under each layer, each layer adding one thing to the one
before (``LAYERS``):

  plain       a plain process: the runner's timing method, no runner, jail, loop or socket
  runner      the runner's own process, unjailed (``python -I`` from its folder, its
              environment, the launch hooks, ``Runner.call``), calls driven in-process
  namespaces  the same inside bubblewrap's namespaces only (the host's root bound, uid kept)
  jail        the same inside the real jail (uid, no capabilities, no_new_privs, limits, the
              read-only root; it installs no seccomp filter, which ``status`` shows)
  loop        + the runner's call loop: ``stage`` (inputs from shared memory), ``call``,
              ``report`` (outputs described) through ``Runner.dispatch``, still in-process
  channel     + the socket to a judge: the real ``loop.py`` serving a minimal judge that
              ships inputs, stages, calls and takes the report with blocking receives
  polling     + the judge's waits (``RunnerProcess.request``: its busy poll on a GPU, select
              with the memory watchdog)
  grader      a full grading (``LocalBackend``, ``EvalConfig(call_trace=True)``)

Rounds are interleaved (layer order reversed in even rounds). Per layer and round: the
medians over the calls of ``host_us`` (in ``solve``, until it returns: the runner's
``host_ms``), ``e2e_us`` (the runner's figure), ``cpu_us`` (the runner process's CPU time per
call cycle: ``process_time`` in-process; ``/proc/PID/task/*/schedstat`` across the calls for
the socket layers; the call trace's ``runner_cpu_ms`` for the grader) and ``wall_us`` (one
call cycle as its driver sees it), the load average, and the runner's seccomp and
speculation state from ``/proc``. Rows go to OUT.jsonl, the summary (per layer: medians over
rounds with min and max, and what each layer adds to the one before) to OUT.summary.json.
On a CPU the figures preview the method on a loaded host; only a GPU's compare with the
quiet run (docs/grading.md, "The timed path, layer by layer").
The in-process layers run ``timed_path_worker.py`` in the runner's place.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.timed_path_worker import WARM_CALLS, _median, proc_status  # noqa: E402

WORKER = Path(__file__).resolve().parent / "timed_path_worker.py"
LAYERS = ("plain", "runner", "namespaces", "jail", "loop", "channel", "polling", "grader")
WORKER_LAYERS = {"plain": "solve", "runner": "call", "namespaces": "call", "jail": "call"}
DRAWS = 4  # distinct input draws cycled through (each a memfd: at most 7 ride one message)
DEFAULT_FILES = {
    "cpu": ("p28", "cute", REPO / "tests/grading/fixtures/honest/p28_plain.py"),
    "cuda": ("p28", "cute", REPO / "problems/solutions/p28_cute.py"),
}
NAMESPACES_ONLY = (
    "#!/bin/sh\n# bubblewrap's namespaces around the runner, nothing else of the jail\n"
    "exec bwrap --unshare-all --unshare-user --die-with-parent --new-session --dev-bind / / "
    '--proc /proc -- {python} "$@"\n'
)


class Context:
    """What every layer of one run shares: the file, its draws, the options."""

    def __init__(self, args: argparse.Namespace, scratch: Path) -> None:
        from engine.grading.judge.wire import Transport
        from problems.registry import get

        self.args = args
        self.cuda = args.device == "cuda"
        problem_id, dsl, path = DEFAULT_FILES[args.device]
        self.problem_id, self.dsl = args.problem or problem_id, args.dsl or dsl
        self.source = Path(args.file or path).read_text()
        problem = get(self.problem_id)
        scale = "full" if self.cuda else "smoke"
        self.draws = [problem.make_inputs(1000 + i, args.device, scale) for i in range(DRAWS)]
        # the worker layers get each draw as bytes in a memfd (judge-made, as in a grading)
        self.shipped = [Transport(False, None).ship(_to_cpu(d)) for d in self.draws]
        self.leaves = [_leaves(s.layout) for s in self.shipped]
        self.sizes = [max(x[i][1] for x in self.leaves) for i in range(len(self.leaves[0]))]
        self.wrapper = scratch / "namespaces.sh"
        self.wrapper.write_text(NAMESPACES_ONLY.format(python=sys.executable))
        self.wrapper.chmod(0o755)

    def load_message(self) -> dict[str, Any]:
        return {"dsl": self.dsl, "dsl_checks": self.cuda, "memory_limit_mb": None}


def _to_cpu(node: Any) -> Any:
    if hasattr(node, "cpu") and hasattr(node, "untyped_storage"):
        return node.cpu()
    if isinstance(node, (list, tuple)):
        return type(node)(_to_cpu(x) for x in node)
    return node


def _leaves(layout: list[Any]) -> list[tuple[int, int]]:
    """(offset, bytes) of each tensor of a shipped layout, in the order it numbers them."""
    found: list[tuple[int, int]] = []

    def walk(node: dict[str, Any]) -> None:
        if "t" in node:
            found.append((node["t"].get("at", 0), node["t"]["nbytes"]))
        for key in ("list", "tuple"):
            for child in node.get(key, []):
                walk(child)

    for node in layout:
        walk(node)
    return found


def _source_fd(source: str) -> int:
    fd = os.memfd_create("mkb-src")
    os.write(fd, source.encode())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def worker_layer(layer: str, ctx: Context) -> dict[str, Any]:
    """One in-process layer: a worker started as that layer's runner, its calls' figures."""
    import subprocess

    from engine.grading.judge import placement
    from engine.grading.judge.runner_proc import RunnerOptions, RunnerProcess

    if layer == "plain":
        share = placement.from_env()  # what place() handed down, if anything
        judge_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [sys.executable, str(WORKER), "--sock-fd", str(worker_end.fileno())]
        with placement.spawning_on(share.runner if share is not None else None):
            popen = subprocess.Popen(  # on the runner's CPUs, as spawn places the runners
                [*argv, "--device", ctx.args.device, "--plain"],
                pass_fds=[worker_end.fileno()],
                cwd=ctx.wrapper.parent,
            )
        worker_end.close()
        proc = RunnerProcess(judge_end, popen.pid, mmap.mmap(-1, mmap.PAGESIZE), popen)
    else:
        python = str(ctx.wrapper) if layer == "namespaces" else sys.executable
        options = RunnerOptions(
            ctx.args.device, dsl=ctx.dsl, jail=layer in ("jail", "loop"), python=python
        )
        proc = RunnerProcess.spawn(options, main=WORKER)
    try:
        proc.wait_ready()
        message = {
            "op": "bench",
            "mode": WORKER_LAYERS.get(layer, "dispatch"),
            "calls": ctx.args.calls,
            "load": ctx.load_message(),
            "layouts": [s.layout for s in ctx.shipped],
            "leaves": ctx.leaves,
            "sizes": ctx.sizes,
        }
        fds = [_source_fd(ctx.source), *(os.dup(s.fds[0]) for s in ctx.shipped)]
        try:
            reply, _ = proc.request(message, time.monotonic() + 600, fds)
        finally:
            for fd in fds:
                os.close(fd)
    finally:
        proc.close()
    reply.pop("op", None)
    return reply


def socket_layer(layer: str, ctx: Context) -> dict[str, Any]:
    """The real runner over its socket: a minimal judge (``channel``) or its waits too."""
    from engine.grading.judge.call_trace import cpu_time_ns
    from engine.grading.judge.runner_proc import RunnerOptions, RunnerProcess, process_tree
    from engine.grading.judge.state import CALL_GAP_SPIN_MS
    from engine.grading.judge.wire import Transport
    from engine.grading.runner.channel import send

    proc = RunnerProcess.spawn(RunnerOptions(ctx.args.device, dsl=ctx.dsl))
    deadline = time.monotonic() + 600

    def request(message: dict[str, Any], fds: list[int] | None = None) -> Any:
        if layer == "polling":
            return proc.request(message, deadline, fds)
        send(proc.sock, message, fds)  # then sleep in recvmsg until the answer
        data, got, _flags, _addr = socket.recv_fds(proc.sock, 1 << 20, 8)
        return json.loads(data), list(got)

    try:
        proc.wait_ready()
        source = _source_fd(ctx.source)
        loaded, _ = proc.request({"op": "load", **ctx.load_message()}, deadline, [source])
        os.close(source)
        if not loaded.get("ok"):
            return {"error": str(loaded)[:500]}
        transport = Transport(ctx.cuda, lambda m: proc.request(m, deadline)[0])
        leaf = process_tree(proc.pid)[-1]
        clock = time.perf_counter
        figures: dict[str, list[float]] = {k: [] for k in ("host", "e2e", "judge", "wall", "f")}
        report: dict[str, Any] = {"op": "report"}
        if layer == "polling":  # the judge's ask between calls (state.CALL_GAP_SPIN_MS)
            report["then_spin_s"] = float(CALL_GAP_SPIN_MS) / 1e3
        for i in range(WARM_CALLS + ctx.args.calls):
            if i == WARM_CALLS:
                cpu_start = cpu_time_ns(leaf) or 0
            w0 = clock()
            shipment = transport.ship(ctx.draws[i % DRAWS])
            request({"op": "stage", "inputs": shipment.layout}, shipment.fds)
            shipment.close()
            j0 = clock()
            reply, _ = request({"op": "call", "id": i})
            j1 = clock()
            _, out_fds = request(report)
            for fd in out_fds:
                os.close(fd)
            if i >= WARM_CALLS:
                figures["host"].append(reply["host_ms"] * 1e3)
                figures["e2e"].append(reply["ms"] * 1e3)
                figures["judge"].append((j1 - j0) * 1e6)
                figures["wall"].append((clock() - w0) * 1e6)
                figures["f"].append(reply.get("faults", 0))
        cpu = ((cpu_time_ns(leaf) or 0) - cpu_start) / ctx.args.calls / 1e3
        status = proc_status(leaf)
        transport.close()
    finally:
        proc.close()
    return {
        "host_us": _median(figures["host"]),
        "e2e_us": _median(figures["e2e"]),
        "cpu_us": round(cpu, 3),
        "wall_us": _median(figures["wall"]),
        "judge_call_us": _median(figures["judge"]),
        "faults": _median(figures["f"]),
        "status": status,
    }


async def grader_layer(backend: Any, ctx: Context) -> dict[str, Any]:
    """One full grading; the figures from its call trace (``EvalConfig.call_trace``)."""
    from engine.grading.api import GradeRequest

    request = GradeRequest(ctx.problem_id, ctx.dsl, ctx.source, device=ctx.args.device)
    feedback = (await backend.grade(request)).to_dict()
    trace = ((feedback.get("clock") or {}).get("call_trace") or {}).get("submission") or {}
    rows = trace.get("rows") or []
    if not rows:
        return {"error": f"no call trace: {feedback.get('verdict')} {feedback.get('reason')}"}

    def pick(key: str) -> list[float]:
        return [r[key] * 1e3 for r in rows if isinstance(r.get(key), (int, float))]

    return {
        "host_us": _median(pick("host_ms")),
        "e2e_us": _median(pick("ms")),
        "cpu_us": _median(pick("runner_cpu_ms")),
        "wall_us": _median(pick("cycle_ms")),
        "judge_call_us": _median(pick("judge_ms")),
        "faults": _median([r["faults"] for r in rows if isinstance(r.get("faults"), int)]),
        "verdict": feedback.get("verdict"),
        "speedup": feedback.get("speedup"),
    }


METRICS = ("host_us", "e2e_us", "cpu_us", "wall_us", "judge_call_us", "faults")


def summarize(rows: list[dict[str, Any]], layers: list[str]) -> dict[str, Any]:
    """Per layer: each metric's median over rounds (with min and max), and what the layer
    adds to the one before it (difference of medians)."""
    out: dict[str, Any] = {}
    previous: dict[str, Any] | None = None
    for layer in layers:
        mine = [r for r in rows if r["layer"] == layer and not r.get("error")]
        entry: dict[str, Any] = {"rounds": len(mine)}
        for metric in METRICS:
            values = [r[metric] for r in mine if isinstance(r.get(metric), (int, float))]
            if values:
                entry[metric] = {
                    "median": round(statistics.median(values), 3),
                    "min": round(min(values), 3),
                    "max": round(max(values), 3),
                }
        if previous is not None:
            entry["adds"] = {
                m: round(entry[m]["median"] - previous[m]["median"], 3)
                for m in METRICS
                if m in entry and m in previous
            }
        statuses = [r["status"] for r in mine if r.get("status")]
        if statuses:
            entry["status"] = statuses[-1]
        errors = [r["error"] for r in rows if r["layer"] == layer and r.get("error")]
        if errors:
            entry["errors"] = errors[:3]
        out[layer] = entry
        if mine:
            previous = entry
    return out


def place(ctx: Context) -> Any:
    """CPU placement as a GPU slot gets it (``--placement auto``): the runners of every
    layer on the runner's core, this process (the judge of the socket layers) on the rest."""
    from engine.grading.judge import placement

    if not ctx.cuda or ctx.args.placement == "off":
        return None
    env = placement.slot_env(0, placement.host_gpus() or 1, ctx.args.placement)
    share = placement.from_env(env)
    if share is not None:
        os.environ.update(env)
        placement.pin_self(share.judge)
    return share


def write_summary(
    out: Path, rows: list[dict[str, Any]], layers: list[str], ctx: Context, share: Any
) -> dict[str, Any]:
    """OUT.summary.json from the rows so far (written after every round)."""
    args = ctx.args
    summary = {
        "device": args.device,
        "preview": not ctx.cuda,
        "problem": ctx.problem_id,
        "dsl": ctx.dsl,
        "file": args.file or str(DEFAULT_FILES[args.device][2].relative_to(REPO)),
        "rounds": args.rounds,
        "calls": args.calls,
        "placement": None if share is None else {"runner": sorted(share.runner)},
        "cpus": os.cpu_count(),
        "load": [r["load"] for r in rows],
        "layers": summarize(rows, layers),
    }
    Path(str(out) + ".summary.json").write_text(json.dumps(summary, indent=1))
    return summary


async def run(args: argparse.Namespace) -> int:
    import asyncio
    import tempfile

    from engine.grading.backends.local import LocalBackend
    from engine.grading.options import EvalConfig

    layers = [x for x in args.layers.split(",") if x]
    unknown = sorted(set(layers) - set(LAYERS))
    if unknown:
        raise SystemExit(f"unknown layers {unknown}; known: {', '.join(LAYERS)}")
    scratch = Path(tempfile.mkdtemp(prefix="mkb-layers-"))
    ctx = Context(args, scratch)
    share = place(ctx)
    backend = None
    if "grader" in layers:
        config = EvalConfig(call_trace=True, counts=(5, WARM_CALLS, args.calls, 3))
        gpus = "auto" if ctx.cuda else None
        backend = LocalBackend(gpus=gpus, config=config, cpu_placement=args.placement)
        await backend.start()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    try:
        with out.open("w") as sink:
            for round_no in range(1, args.rounds + 1):
                for layer in layers if round_no % 2 else layers[::-1]:
                    load = os.getloadavg()[0]
                    started = time.perf_counter()
                    if layer == "grader":
                        row = await grader_layer(backend, ctx)
                    elif layer in ("channel", "polling"):
                        row = await asyncio.to_thread(socket_layer, layer, ctx)
                    else:
                        row = await asyncio.to_thread(worker_layer, layer, ctx)
                    row = {"round": round_no, "layer": layer, **row}
                    row.update(load=round(load, 2), wall_s=round(time.perf_counter() - started, 2))
                    rows.append(row)
                    sink.write(json.dumps(row) + "\n")
                    sink.flush()
                    print(json.dumps({k: row.get(k) for k in ("round", "layer", *METRICS)}))
                write_summary(out, rows, layers, ctx, share)  # each round: a cut-off run keeps one
    finally:
        if backend is not None:
            await backend.close()
    print(json.dumps(write_summary(out, rows, layers, ctx, share)["layers"], indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    import asyncio

    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--file", help="the submission (default: p28, see the docstring)")
    parser.add_argument("--problem", help="its problem (default p28)")
    parser.add_argument("--dsl", choices=("cute", "tirx"), help="its DSL (default cute)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=100, help="timed calls per layer")
    parser.add_argument("--layers", default=",".join(LAYERS), help="comma-separated, in order")
    parser.add_argument("--placement", choices=("auto", "off"), default="auto")
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
