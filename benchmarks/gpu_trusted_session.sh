#!/usr/bin/env bash
# One GPU session for the trusted judge (after the DSL parts are staged, docs/benchmarks.md):
#   STAGE=validate  the jail on this host, runner start-up, every reference solution and the
#                   two controls
#   STAGE=redteam   the dynamic red-team set with a real CuTe kernel, p36 tirx five times
#                   (PART=1/2 then PART=2/2 in two device calls: the set takes ~10 min now)
#   STAGE=scoring   every solution once, p36 tirx four more times, the red-team cases of scoring
#                   (EXTRA: more solution files to grade after them, e.g. variants)
#   STAGE=profile   the solutions outside the grader (host/device/e2e), the full-scale catalog
#                   (CHECK=0 skips it)
#   STAGE=check     the full-scale catalog alone, JOBS children at a time (default 4)
#   STAGE=smallcalls p36 TIRx five times, p28 CuTe and p25 TIRx through one warm grader
#                   without and with the runners' warm-up spin (WARMUP_MS, default 2) after staging
#   STAGE=diag      which CPUs slow each other (cpu_pairs.py), then three warm graders in
#                   turn, each grading p36 TIRx five times, p36 CuTe, p28 CuTe and p25 TIRx
#                   with the per-call trace (call_trace_summary.py prints it)
#   STAGE=warmcalls one warm grader without, then one with, EvalConfig.warm_calls (an untimed
#                   call on the previous inputs before each timed call), each grading p36
#                   TIRx five times, p36 CuTe, p28 CuTe, p25 TIRx and p72 TIRx with the trace
#   STAGE=overhead  grading overhead (cold, warm back to back, warm paced) and the grading
#                   jail's escape probes with their unjailed controls
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
from engine.grading.judge.runner_proc import RunnerOptions, RunnerProcess
start = time.time()
runner = RunnerProcess.spawn(RunnerOptions(device="cuda"))
print("ready", runner.wait_ready(110), round(time.time() - start, 2), "s")
print(runner.request({"op": "call", "id": "x"}, time.monotonic() + 30)[0])
print(runner.log_tail())
runner.close()
PY
    echo "rc=$?" >> "$WORK/jail_smoke.txt"
    timeout 150 python3 benchmarks/runner_startup.py --device cuda --repeats 1 > "$WORK/startup.json" 2>&1
    timeout "${VALIDATION_S:-400}" python3 benchmarks/gpu_validation.py "$WORK/grading" \
      > "$WORK/grading.log" 2>&1
    echo "validation rc=$?" >> "$WORK/grading.log"
    { cat "$WORK/jail_smoke.txt"; cat "$WORK/startup.json"
      grep -h '"file"' "$WORK/grading.log" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r["file"], r["verdict"], r["reason"], "speedup=%s" % r["speedup"], "wall=%s" % r["wall_s"], "ok=%s" % r["as_expected"])
'; tail -5 "$WORK/grading.log"; } > "$OUT/summary.txt" 2>&1
    ;;
  redteam)
    timeout "${REDTEAM_S:-420}" python3 benchmarks/redteam_gpu.py --out "$WORK/redteam" \
      --device cuda --part "${PART:-1/1}" > "$WORK/redteam.log" 2>&1
    echo "redteam rc=$?" >> "$WORK/redteam.log"
    if [ "${REPEAT:-1}" = 1 ]; then
      timeout "${REPEAT_S:-150}" python3 benchmarks/gpu_validation.py "$WORK/repeat" \
        problems/solutions/p36_tirx.py problems/solutions/p36_tirx.py \
        problems/solutions/p36_tirx.py problems/solutions/p36_tirx.py \
        problems/solutions/p36_tirx.py > "$WORK/repeat.log" 2>&1
    fi
    { tail -25 "$WORK/redteam.log"; grep -h speedup "$WORK/repeat.log" | cut -c1-300; } \
      > "$OUT/summary.txt" 2>&1
    ;;
  scoring)
    # every reference solution once and p36 tirx four more times (repeatability), then the
    # red-team cases the scoring touches
    S=problems/solutions
    timeout "${SCORING_S:-330}" python3 benchmarks/gpu_validation.py "$WORK/scoring" \
      $S/p*_cute.py $S/p*_tirx.py $S/p36_tirx.py $S/p36_tirx.py $S/p36_tirx.py $S/p36_tirx.py \
      ${EXTRA:-} > "$WORK/scoring.log" 2>&1
    echo "scoring rc=$?" >> "$WORK/scoring.log"
    D=tests/grading/fixtures/dynamic
    timeout "${REDTEAM_S:-120}" python3 benchmarks/redteam_gpu.py --out "$WORK/redteam" \
      --device cuda $D/c2_bound_clocks_and_cuda_events.py $D/c3_shaves_within_the_bound.py \
      $D/f3_timer_signal_fills_later.py $D/b1_runner_functions_replaced.py \
      > "$WORK/redteam.log" 2>&1
    { grep -h '"file"' "$WORK/scoring.log" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r["file"], r["verdict"], r["reason"], "speedup=%.3f" % (r["speedup"] or 0), "impl=%s" % r["impl_median_ms"], "ev=%s" % r.get("impl_event_median_ms"), "eager=%s" % r["eager_median_ms"], (r.get("clock") or {}).get("submission", {}).get("scored_by"))
'; tail -3 "$WORK/scoring.log"; tail -20 "$WORK/redteam.log"; } > "$OUT/summary.txt" 2>&1
    ;;
  profile)
    # the solutions measured outside the grader (host, device, end to end; docs/solutions.md),
    # then the whole catalog at full scale
    timeout "${PROFILE_S:-220}" python3 benchmarks/solutions_profile.py "$WORK/profile.jsonl" \
      --device cuda --calls 15 > "$WORK/profile.log" 2>&1
    echo "profile rc=$?" >> "$WORK/profile.log"
    if [ "${CHECK:-1}" = 1 ]; then
      timeout "${CHECK_S:-340}" python3 -m problems.check --device cuda --scale full \
        --jobs "${JOBS:-4}" > "$WORK/check_full.txt" 2>&1
      echo "rc=$?" >> "$WORK/check_full.txt"
    else
      echo "skipped (CHECK=0)" > "$WORK/check_full.txt"
    fi
    { python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "error" in r:
        print(r["file"], "ERROR", r["error"][:200]); continue
    e, s = r["eager"], r["solution"]
    print(r["file"], "host %s/%s dev %s/%s e2e %s/%s sol %s speedup %s pct %s" % (s["host_us"], e["host_us"], s["device_us"], e["device_us"], s["e2e_us"], e["e2e_us"], r["sol_us"], r["speedup"], r["pct_sol"]))
' "$WORK/profile.jsonl"; grep -h '"case"' "$WORK/profile.log"; tail -2 "$WORK/profile.log"; grep -v PASS "$WORK/check_full.txt" | tail -8; } > "$OUT/summary.txt" 2>&1
    ;;
  check)
    timeout "${CHECK_S:-400}" python3 -m problems.check --device cuda --scale full \
      --jobs "${JOBS:-4}" > "$WORK/check_full.txt" 2>&1
    echo "rc=$?" >> "$WORK/check_full.txt"
    { grep -v PASS "$WORK/check_full.txt" | cut -c1-300 | tail -12; } > "$OUT/summary.txt" 2>&1
    ;;
  smallcalls)
    S=problems/solutions
    for W in 0 "${WARMUP_MS:-2}"; do
      timeout "${STEPS_S:-150}" python3 benchmarks/grading_steps_gpu.py "$WORK/steps_w$W.jsonl" \
        --wait-s 15 --gap-s 2 --stage-warmup-ms "$W" $S/p36_tirx.py $S/p36_tirx.py \
        $S/p36_tirx.py $S/p36_tirx.py $S/p36_tirx.py $S/p28_cute.py $S/p25_tirx.py \
        > "$WORK/steps_w$W.log" 2>&1
    done
    { for f in "$WORK"/steps_w*.jsonl; do echo "$f";
      python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "file" in r:
        s = ((r.get("breakdown") or {}).get("submission") or {})
        print(r["file"], r["verdict"], "%.2f" % (r["speedup"] or 0), "host", s.get("host_ms"), "dev", s.get("device_ms"), "e2e", s.get("e2e_ms"))
' "$f"; done; } > "$OUT/summary.txt" 2>&1
    ;;
  diag)
    timeout 90 python3 benchmarks/cpu_pairs.py "$WORK/pairs.json" > "$WORK/pairs.log" 2>&1
    S=problems/solutions
    for V in "first:" "second:" "third:"; do
      name=${V%%:*}
      # shellcheck disable=SC2086
      timeout "${STEPS_S:-130}" python3 benchmarks/grading_steps_gpu.py "$WORK/steps_$name.jsonl" \
        --wait-s "${WAIT_S:-15}" --gap-s 2 --call-trace ${V#*:} $S/p36_tirx.py $S/p36_tirx.py \
        $S/p36_tirx.py $S/p36_tirx.py $S/p36_tirx.py $S/p36_cute.py $S/p28_cute.py \
        $S/p25_tirx.py > "$WORK/steps_$name.log" 2>&1
    done
    { cat "$WORK/pairs.log"; for name in first second third; do echo "== $name";
      python3 benchmarks/call_trace_summary.py "$WORK/steps_$name.jsonl" "$WORK/pairs.json";
      done; } > "$OUT/summary.txt" 2>&1
    ;;
  warmcalls)
    S=problems/solutions
    for W in off on; do
      FLAG=""; [ "$W" = on ] && FLAG=--warm-calls
      timeout "${STEPS_S:-200}" python3 benchmarks/grading_steps_gpu.py "$WORK/steps_$W.jsonl" \
        --wait-s 15 --gap-s 2 --call-trace $FLAG $S/p36_tirx.py $S/p36_tirx.py $S/p36_tirx.py \
        $S/p36_tirx.py $S/p36_tirx.py $S/p36_cute.py $S/p28_cute.py $S/p25_tirx.py \
        $S/p72_tirx.py > "$WORK/steps_$W.log" 2>&1
    done
    { for W in off on; do echo "== warm calls $W"
      python3 benchmarks/call_trace_summary.py "$WORK/steps_$W.jsonl" 2>&1 | cut -c1-300; done; } \
      > "$OUT/summary.txt" 2>&1
    ;;
  overhead)
    timeout "${OVERHEAD_S:-300}" python3 benchmarks/grading_overhead.py --device cuda \
      --repeats 3 --json > "$WORK/overhead.json" 2> "$WORK/overhead.log"
    echo "overhead rc=$?" >> "$WORK/overhead.log"
    timeout "${ESCAPE_S:-240}" python3 benchmarks/jail_escape_gpu.py --device cuda \
      > "$WORK/escape.jsonl" 2> "$WORK/escape.log"
    echo "escape rc=$?" >> "$WORK/escape.log"
    { cat "$WORK/overhead.json"; tail -3 "$WORK/overhead.log"; cat "$WORK/escape.jsonl";
      tail -3 "$WORK/escape.log"; } > "$OUT/summary.txt" 2>&1
    ;;
esac
tar czf "$OUT/results.tgz" -C "$WORK" .
cat "$OUT/summary.txt"
