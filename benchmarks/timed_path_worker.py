"""The worker of ``timed_path_layers.py`` (started by it, never by hand): in a runner's place,
it times the calls of one in-process layer and answers with their figures.

Copied beside the runner's files and started as ``loop.py`` would be
(``RunnerProcess.spawn(main=...)``: unjailed, in bubblewrap's namespaces or in the jail), or as
a plain process (``--plain``: no runner settings, no launch hooks). It gets one ``bench``
request over its socket (the source and the draws as memfds) and calls ``solve`` in one mode:
``solve`` (a plain loop: switch kernel, synchronize, the call), ``call`` (``Runner.call``) or
``dispatch`` (``stage``, ``call`` and ``report`` through ``Runner.dispatch``, the inputs
written by this process into one shared memory or the device buffers first, as a judge
would). Standard library only at the top: in the jail only the runner's files lie beside it.
"""

from __future__ import annotations

import argparse
import mmap
import os
import resource
import socket
import statistics
import sys
import time
from typing import Any

WARM_CALLS = 10
STATUS_KEYS = ("Seccomp", "NoNewPrivs", "Speculation_Store_Bypass", "Cpus_allowed_list")


def proc_status(pid: int | str = "self") -> dict[str, str]:
    """The seccomp, no_new_privs and speculation lines of a process's status."""
    out: dict[str, str] = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in STATUS_KEYS:
                    out[key] = value.strip()
    except OSError:
        pass
    return out


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def _to_device(node: Any, torch: Any) -> Any:
    if isinstance(node, torch.Tensor):
        return node.to("cuda")
    if isinstance(node, (list, tuple)):
        return type(node)(_to_device(x, torch) for x in node)
    return node


def _cuda_layout(node: Any, counter: list[int]) -> Any:
    """A CPU staging layout turned into one over the runner's device buffers, in order."""
    if "t" in node:
        desc = {k: v for k, v in node["t"].items() if k != "at"}
        desc.update(device="cuda", buf=counter[0])
        counter[0] += 1
        return {"t": desc}
    for key in ("list", "tuple"):
        if key in node:
            return {key: [_cuda_layout(x, counter) for x in node[key]]}
    return node


def worker_calls(runner: Any, message: dict[str, Any], fds: list[int], plain: bool) -> Any:
    """``calls`` timed calls after WARM_CALLS untimed, driven in-process (one worker layer)."""
    torch, cuda, clock = runner.torch, runner.cuda, time.perf_counter
    source_fd, draw_fds = fds[0], fds[1:]
    mode = message["mode"]
    if plain:  # imported as plain_timing.py does: no launch hooks, no bypass page
        import importlib.util

        path = os.path.abspath("submission.py")
        with os.fdopen(source_fd, "rb") as src, open(path, "wb") as dst:
            dst.write(src.read())
        spec = importlib.util.spec_from_file_location("submission", path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        solve = module.solve
    else:
        loaded = runner.load({"op": "load", **message["load"]}, [source_fd])
        if not loaded.get("ok"):
            return {"error": str(loaded)[:500]}
        solve = runner.solve
    layouts = message["layouts"]
    draws = [runner.build_inputs(layout, [os.dup(fd)]) for layout, fd in zip(layouts, draw_fds)]
    if cuda:
        draws = [_to_device(d, torch) for d in draws]
    host: list[float] = []
    e2e: list[float] = []
    cpu: list[float] = []
    wall: list[float] = []
    faults: list[float] = []
    stage_fds: list[int] = []
    if mode == "dispatch":  # the judge's side: one input memory (or the device buffers)
        flats = [
            torch.frombuffer(mmap.mmap(fd, os.fstat(fd).st_size), dtype=torch.uint8)
            for fd in draw_fds
        ]
        if cuda:
            runner.alloc({"sizes": message["sizes"]})
            layouts = [_cuda_layout({"list": x}, [0])["list"] for x in layouts]
            flats = [f.to("cuda") for f in flats]
        else:
            shared = os.memfd_create("mkb-in")
            os.ftruncate(shared, max(f.numel() for f in flats))
            region = torch.frombuffer(mmap.mmap(shared, 0), dtype=torch.uint8)
            stage_fds = [shared]  # sent with the first stage only, as the judge does
    for i in range(WARM_CALLS + message["calls"]):
        k = i % len(draws)
        if mode == "dispatch":  # the judge writes the inputs (outside the accounting)
            if cuda:
                for n, (at, nbytes) in enumerate(message["leaves"][k]):
                    runner.buffers[n][:nbytes].copy_(flats[k][at : at + nbytes])
                runner._sync()
            else:
                region[: flats[k].numel()].copy_(flats[k])
        c0, w0 = time.process_time(), clock()
        if mode == "solve":
            if cuda:
                runner._switch.add_(1.0)
                runner._sync()
            flt = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            t0 = clock()
            out = solve(*draws[k])
            t1 = clock()
            if cuda:
                runner._sync()
            t2 = clock()
            flt = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - flt
            reply = {"host_ms": (t1 - t0) * 1e3, "ms": (t2 - t0) * 1e3, "faults": flt}
            del out
        elif mode == "call":
            runner.pending = draws[k]
            reply = runner.call({"id": i})
        else:
            runner.dispatch({"op": "stage", "inputs": layouts[k]}, stage_fds)
            stage_fds = []
            reply, _ = runner.dispatch({"op": "call", "id": i}, [])
            _, out_fds = runner.dispatch({"op": "report"}, [])
            for fd in out_fds:
                os.close(fd)
        c1, w1 = time.process_time(), clock()
        if i >= WARM_CALLS:
            host.append(reply["host_ms"] * 1e3)
            e2e.append(reply["ms"] * 1e3)
            cpu.append((c1 - c0) * 1e6)
            wall.append((w1 - w0) * 1e6)
            faults.append(reply["faults"])
    return {
        "host_us": _median(host),
        "e2e_us": _median(e2e),
        "cpu_us": _median(cpu),
        "wall_us": _median(wall),
        "faults": _median(faults),
        "status": proc_status(),
    }


def plain_runner(cls: Any, device: str) -> Any:
    """Only what a plain process needs of a runner: its input views and the switch kernel
    (none of its process settings: ``Runner.__init__`` is not run)."""
    import torch

    runner = cls.__new__(cls)
    runner.torch, runner.cuda, runner.buffers = torch, device == "cuda", []
    if runner.cuda:
        runner._switch, runner._sync = torch.zeros(1, device="cuda"), torch.cuda.synchronize
    else:
        torch.set_num_threads(1)  # as the runner and plain_timing.py do
    return runner


def worker_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="timed_path_layers.py --worker")
    parser.add_argument("--sock-fd", type=int, required=True)
    parser.add_argument("--flag-fd", type=int, default=-1)
    parser.add_argument("--device", choices=("cpu", "cuda"), required=True)
    parser.add_argument("--preload", default="")
    parser.add_argument("--path", action="append", default=[])
    parser.add_argument("--plain", action="store_true")
    args = parser.parse_args(argv)
    here = os.path.dirname(os.path.abspath(__file__))
    if args.plain:
        sys.path.insert(0, os.path.dirname(here))
        from engine.grading.runner.channel import receive, send
        from engine.grading.runner.loop import Runner
    else:  # the runner's files lie beside this copy
        sys.path[0:0] = [here, *args.path]
        from channel import receive, send  # type: ignore[import-not-found,no-redef]
        from loop import Runner  # type: ignore[import-not-found,no-redef]
    import importlib

    for name in filter(None, args.preload.split(",")):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - optional DSLs
            continue
    sock = socket.socket(fileno=args.sock_fd)
    flag = mmap.mmap(args.flag_fd, mmap.PAGESIZE) if args.flag_fd >= 0 else None
    runner = plain_runner(Runner, args.device) if args.plain else Runner(sock, args.device, flag)
    send(sock, {"op": "ready"})
    message, fds = receive(sock)
    try:
        result = worker_calls(runner, message, fds, args.plain)
    except Exception as exc:  # noqa: BLE001 - reported to the driver
        result = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    send(sock, {"op": "benched", **result})
    return 0


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
