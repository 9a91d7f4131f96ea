#!/usr/bin/env bash
# One batched GPU session (after the DSL parts are staged, see docs/benchmarks.md):
# grade every reference solution and the negative controls, measure grading overhead,
# then time the whole catalog at full scale. Results go under $OUT (default ./gpu-out).
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONPATH=.
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
python3 -c "import torch, cutlass, tvm; print(torch.__version__, cutlass.__version__, tvm.__version__)" \
  > "$OUT/versions.txt" 2>&1
timeout "${VALIDATION_S:-260}" python3 benchmarks/gpu_validation.py "$OUT/grading" \
  > "$OUT/grading.log" 2>&1
echo "validation rc=$?" >> "$OUT/grading.log"
timeout "${OVERHEAD_S:-90}" python3 benchmarks/grading_overhead.py --device cuda --repeats 3 --json \
  > "$OUT/overhead.json" 2> "$OUT/overhead.log"
echo "overhead rc=$?" >> "$OUT/overhead.log"
timeout "${CATALOG_S:-220}" python3 benchmarks/catalog_full_scale.py --out "$OUT/catalog.json" \
  --calls 3 --budget-s "$(( ${CATALOG_S:-220} - 20 ))" > "$OUT/catalog.log" 2>&1
echo "catalog rc=$?" >> "$OUT/catalog.log"
tail -3 "$OUT/grading.log" "$OUT/overhead.log" "$OUT/catalog.log"
