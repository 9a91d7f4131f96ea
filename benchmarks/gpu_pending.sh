#!/usr/bin/env bash
# What is left for a GPU, in one place: each step one device call (at most 10 minutes), run
# from the staged snapshot (benchmarks/gpu_stage.sh; then `cd /tmp/snap && export PYTHONPATH=.`)
# with its records under $OUT. Commit the records under docs/gpu-runs/DATE-purpose/.
#
#   bash benchmarks/gpu_pending.sh STEP $OUT        STEP: one of the names below, or "list"
#
# One lease is 1,800 s of device time; staging takes ~2 min of it (the machine's start ~80 s,
# the three calls ~40 s). On one H100 (2026-12-07) a 420 s `paired` call graded ~25 finals and
# `throughput` ran 230 s. Next, in order: paired (until no rc=124), throughput, layers, quiet.
#
#   host       the quiet path: where a small call's host time goes in a plain process (hooks,
#              CUPTI attached, CUPTI recording, CUPTI detached), p28/p36 both DSLs  (~4 min)
#   layers     the timed path one layer at a time (plain, runner, namespaces, jail, loop,
#              channel, polling, grader), p28 CuTe, 2 rounds: where the runner's host time
#              per call goes (benchmarks/timed_path_layers.py)                       (~3 min)
#   quiet      the grader against a plain process, p28/p36 both DSLs, 3 rounds, with the
#              old 10 ms poll between calls and without CPU placement beside the default; the span
#              speedups and A/A bands come with it                                  (~8 min)
#   quiet25    the same for p25 (~50 µs calls), 3 rounds                           (~4 min)
#   p52        the same for p52 (2 ms calls): A/A bands and span vs end to end      (~4 min)
#   redteam1   the dynamic red-team set, part 1 of 2, real p28 CuTe kernel          (~150 s)
#   redteam2   part 2 of 2                                                          (~150 s)
#   validate   the 14 reference solutions and the two controls (ARCHS, target check) (~250 s)
#   solutions  experiments/solutions.toml on the GPU, then its bundle (solutions.mkb) (~7 min)
#   paired     experiments/solutions.toml resumed from a store (3rd argument), cut at PAIRED_S
#              (default 420 s) so the store comes back; then its analysis             (~8 min)
#   regrade    in a later lease: mkb regrade of that bundle (carry it back in)      (~7 min)
#   throughput solutions.toml's 28 gradings and 20 of p28 (CuTe, TIRx) back to back through the
#              local backend, two clients, the compile cache on: gradings per minute,
#              runner_wait, compile time first vs later                           (< 5 min)
set -euo pipefail
STEP=${1:?usage: $0 STEP OUT (or: $0 list)}
OUT=${2:-}
S=problems/solutions
if [ "$STEP" = list ]; then
  sed -n '12,31p' "$0" | sed 's/^#//'
  exit 0
fi
: "${OUT:?OUT is required}"
mkdir -p "$OUT"
case "$STEP" in
  host)
    python3 benchmarks/host_overhead_gpu.py "$OUT/host_overhead.jsonl" \
      $S/p28_cute.py $S/p28_tirx.py $S/p36_cute.py $S/p36_tirx.py --rounds 3 ;;
  layers)
    timeout 290 python3 benchmarks/timed_path_layers.py "$OUT/layers.jsonl" --device cuda \
      --rounds 2 --calls 100 ;;
  quiet)
    python3 benchmarks/grader_vs_plain_gpu.py "$OUT/quiet.jsonl" \
      $S/p28_cute.py $S/p28_tirx.py $S/p36_cute.py $S/p36_tirx.py \
      --rounds 3 --variant no-gap-spin --variant no-placement ;;
  quiet25)
    python3 benchmarks/grader_vs_plain_gpu.py "$OUT/quiet25.jsonl" $S/p25_cute.py $S/p25_tirx.py \
      --rounds 3 --variant no-gap-spin --variant no-placement ;;
  p52)
    python3 benchmarks/grader_vs_plain_gpu.py "$OUT/p52.jsonl" $S/p52_cute.py $S/p52_tirx.py \
      --rounds 5 --calls 20 ;;
  redteam1) python3 benchmarks/redteam_gpu.py --out "$OUT/rt" --device cuda --part 1/2 ;;
  redteam2) python3 benchmarks/redteam_gpu.py --out "$OUT/rt" --device cuda --part 2/2 ;;
  validate) python3 benchmarks/gpu_validation.py "$OUT/validation" ;;
  solutions)
    python3 -m app.cli run experiments/solutions.toml --db "$OUT/solutions.sqlite"
    python3 -m app.cli analyze --experiment solutions --db "$OUT/solutions.sqlite" \
      > "$OUT/solutions.analysis.txt"
    python3 -m app.cli bundle export solutions --db "$OUT/solutions.sqlite" --out "$OUT/solutions.mkb" ;;
  paired)
    STORE=${3:?paired needs a store to resume: $0 paired OUT STORE}
    cp "$STORE" "$OUT/sol.sqlite"
    timeout "${PAIRED_S:-420}" python3 -m app.cli run experiments/solutions.toml --db "$OUT/sol.sqlite" \
      > "$OUT/run.txt" 2>&1 || echo "rc=$?" >> "$OUT/run.txt"
    python3 -c "import sqlite3,sys; sqlite3.connect(sys.argv[1]).execute('PRAGMA wal_checkpoint(TRUNCATE)')" \
      "$OUT/sol.sqlite"  # a run cut by the limit left its last writes in the WAL
    python3 -m app.cli analyze --experiment solutions --db "$OUT/sol.sqlite" > "$OUT/analysis.txt" ;;
  regrade)
    BUNDLE=${3:?regrade needs the bundle: $0 regrade OUT BUNDLE}
    python3 -m app.cli bundle verify "$BUNDLE"
    python3 -m app.cli regrade "$BUNDLE" --device cuda --db "$OUT/regrade.sqlite" > "$OUT/regrade.txt" ;;
  throughput)
    timeout 295 python3 benchmarks/grading_throughput.py "$OUT/throughput.jsonl" --device cuda \
      --budget-s 180 ;;
  *) echo "unknown step $STEP ($0 list)" >&2; exit 2 ;;
esac
