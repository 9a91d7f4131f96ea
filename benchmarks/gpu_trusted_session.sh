#!/usr/bin/env bash
# One GPU session for the trusted judge (after the DSL parts are staged, docs/benchmarks.md):
#   STAGE=validate  the jail on this host, then every reference solution and the two controls
#   STAGE=redteam   the dynamic red-team set with a real CuTe kernel, grading overhead, and
#                   p36 tirx five times (repeatability)
# A carried bubblewrap (.gpu-dsl/bwrap: the binary and its three libraries) is installed first
# when the host has none. Everything lands in $OUT/results.tgz plus a short summary.txt.
set -u
OUT=${OUT:-gpu-out}
WORK=$(mktemp -d)
mkdir -p "$OUT"
export PYTHONPATH=.
if ! command -v bwrap >/dev/null 2>&1 && test -x .gpu-dsl/bwrap/bwrap; then
  cp .gpu-dsl/bwrap/bwrap /usr/local/bin/ && cp .gpu-dsl/bwrap/*.so.* /usr/local/lib/ && ldconfig
fi
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; bwrap --version;
  command -v setpriv prlimit; python3 -c "import torch; print(torch.__version__)"; } \
  > "$WORK/host.txt" 2>&1
case "${STAGE:-validate}" in
  validate)
    timeout 120 python3 - > "$WORK/jail_smoke.txt" 2>&1 <<'PY'
import time
from engine.grading.runner_proc import RunnerOptions, RunnerProcess
start = time.time()
runner = RunnerProcess.spawn(RunnerOptions(device="cuda"))
print("ready", runner.wait_ready(110), round(time.time() - start, 2), "s")
print(runner.request({"op": "call", "id": "x"}, time.monotonic() + 30)[0])
print(runner.log_tail())
runner.close()
PY
    echo "rc=$?" >> "$WORK/jail_smoke.txt"
    cp "$WORK/jail_smoke.txt" "$OUT/"
    timeout "${VALIDATION_S:-420}" python3 benchmarks/gpu_validation.py "$WORK/grading" \
      > "$WORK/grading.log" 2>&1
    echo "validation rc=$?" >> "$WORK/grading.log"
    grep -h '"file"' "$WORK/grading.log" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r["file"], r["verdict"], r["reason"], "speedup=%s" % r["speedup"], "wall=%s" % r["wall_s"], "ok=%s" % r["as_expected"])
' > "$OUT/summary.txt"
    tail -5 "$WORK/grading.log" >> "$OUT/summary.txt"
    ;;
  both)
    timeout "${VALIDATION_S:-300}" python3 benchmarks/gpu_validation.py "$WORK/grading" \
      > "$WORK/grading.log" 2>&1
    echo "validation rc=$?" >> "$WORK/grading.log"
    timeout "${REDTEAM_S:-200}" python3 benchmarks/redteam_gpu.py --out "$WORK/redteam" \
      --device cuda > "$WORK/redteam.log" 2>&1
    echo "redteam rc=$?" >> "$WORK/redteam.log"
    { grep -h '"file"' "$WORK/grading.log" | cut -c1-400; tail -3 "$WORK/grading.log";
      tail -40 "$WORK/redteam.log"; } > "$OUT/summary.txt" 2>&1
    ;;
  redteam)
    timeout "${REDTEAM_S:-300}" python3 benchmarks/redteam_gpu.py --out "$WORK/redteam" \
      --device cuda > "$WORK/redteam.log" 2>&1
    echo "redteam rc=$?" >> "$WORK/redteam.log"
    timeout "${OVERHEAD_S:-120}" python3 benchmarks/grading_overhead.py --device cuda \
      --repeats 3 --json > "$WORK/overhead.json" 2> "$WORK/overhead.log"
    echo "overhead rc=$?" >> "$WORK/overhead.log"
    timeout "${REPEAT_S:-150}" python3 benchmarks/gpu_validation.py "$WORK/repeat" \
      problems/solutions/p36_tirx.py problems/solutions/p36_tirx.py \
      problems/solutions/p36_tirx.py problems/solutions/p36_tirx.py \
      problems/solutions/p36_tirx.py > "$WORK/repeat.log" 2>&1
    { tail -25 "$WORK/redteam.log"; cat "$WORK/overhead.json"; grep -h speedup "$WORK/repeat.log"; } \
      > "$OUT/summary.txt" 2>&1
    ;;
esac
tar czf "$OUT/results.tgz" -C "$WORK" .
cat "$OUT/summary.txt"
