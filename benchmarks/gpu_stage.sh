#!/usr/bin/env bash
# Build the three carries that stage the DSLs on a GPU host under the device tool's 64 MiB per
# call (docs/benchmarks.md, "Staging the DSLs"), and a snapshot of one commit to run there, so a
# run measures exactly that commit whatever the working tree holds meanwhile.
#
#   bash benchmarks/gpu_stage.sh [REV] [DSL_DIR]     (REV: default HEAD; DSL_DIR: ../shared/gpu/dsl)
#
# Writes .gpu-stage/a (p1, first 50 MiB), .gpu-stage/b (the rest of p1, p2's first 40 MiB) and
# .gpu-stage/c (the rest of p2, p3, bubblewrap with its three libraries, the wheels of
# sqlite-utils, sqlite-fts4 and click-default-group, which the device image lacks, and
# tree.tar.gz of REV).
# Then, on one warm host, three device calls back to back (carry each folder in turn):
#   a: mkdir -p /opt/dsl/stage && cp .gpu-stage/a/* /opt/dsl/stage/
#   b: bash benchmarks/gpu_stage.sh --host b
#   c: bash benchmarks/gpu_stage.sh --host c && cd /tmp/snap && <the work>
set -euo pipefail
if [ "${1:-}" = "--host" ]; then  # on the GPU host, from the repository root
  case "$2" in
    b)
      cat /opt/dsl/stage/p1.part0 .gpu-stage/b/p1.part1 > /opt/dsl/stage/cu13.tar.xz
      mkdir -p /opt/dsl/site
      tar xJf /opt/dsl/stage/cu13.tar.xz -C /opt/dsl/site --strip-components=1
      cp .gpu-stage/b/p2.part0 /opt/dsl/stage/
      echo "p1 staged; p2 part 0 kept" ;;
    c)
      mkdir -p /tmp/p2 && cat /opt/dsl/stage/p2.part0 .gpu-stage/c/p2.part1 > /tmp/p2/tvm.tar.xz
      cp .gpu-stage/c/p2_install.sh /tmp/p2/install.sh && bash /tmp/p2/install.sh
      bash .gpu-stage/c/p3/install.sh
      # the store's packages the device image lacks (sqlite-utils and its two small needs)
      python3 -m pip install -q --no-index --no-deps --no-compile --target /opt/dsl/site \
        .gpu-stage/c/wheels/*.whl
      if ! command -v bwrap >/dev/null 2>&1; then
        cp .gpu-stage/c/bwrap/bwrap /usr/local/bin/ && cp .gpu-stage/c/bwrap/*.so.* /usr/local/lib/
        ldconfig
      fi
      rm -rf /tmp/snap && mkdir -p /tmp/snap && tar xzf .gpu-stage/c/tree.tar.gz -C /tmp/snap
      echo "p2, p3 and bubblewrap staged; the snapshot is in /tmp/snap" ;;
    *) echo "usage: $0 --host b|c" >&2; exit 2 ;;
  esac
  exit 0
fi
REV=${1:-HEAD}
DSL=${2:-../shared/gpu/dsl}
cd "$(dirname "$0")/.."
rm -rf .gpu-stage && mkdir -p .gpu-stage/a .gpu-stage/b .gpu-stage/c/bwrap
head -c 50M "$DSL/p1/cu13.tar.xz" > .gpu-stage/a/p1.part0
tail -c +52428801 "$DSL/p1/cu13.tar.xz" > .gpu-stage/b/p1.part1
head -c 40M "$DSL/p2/tvm.tar.xz" > .gpu-stage/b/p2.part0
tail -c +41943041 "$DSL/p2/tvm.tar.xz" > .gpu-stage/c/p2.part1
cp -r "$DSL/p3" .gpu-stage/c/p3
cp "$DSL/p2/install.sh" .gpu-stage/c/p2_install.sh
BWRAP=$(command -v bwrap)
cp "$BWRAP" .gpu-stage/c/bwrap/
for lib in $(ldd "$BWRAP" | grep -oE "/\S*(selinux|libcap|pcre2-8)\S*"); do cp "$lib" .gpu-stage/c/bwrap/; done
mkdir -p .gpu-stage/c/wheels
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 -d .gpu-stage/c/wheels \
  "sqlite-utils==$(python3 -c 'import importlib.metadata as m; print(m.version("sqlite-utils"))' 2>/dev/null \
    || .venv/bin/python -c 'import importlib.metadata as m; print(m.version("sqlite-utils"))')" \
  sqlite-fts4 click-default-group
git archive "$REV" | gzip > .gpu-stage/c/tree.tar.gz
du -sh .gpu-stage/*
