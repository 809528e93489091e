#!/usr/bin/env bash
# `gputui analyze` on a real trace of close to a gigabyte: a GPT-2 trained on the
# GPU and profiled with shapes and Python stacks (bench/jobs/big_trace.py) for as
# many steps as make about TARGET_MB of JSON, then read by gputui, by an earlier
# checkout (BEFORE, optional) and by the typed-decode floor, two rounds each
# (bench/bench_analyze.py --file).  A short trace of the same job (SMALL_STEPS
# steps) is kept gzipped in OUTDIR.
#
#     bash bench/gpu_big_trace.sh OUTDIR [BEFORE]
#
# Run from the repository root with python3, torch, transformers and gputui's
# dependencies on the path (PY to choose the interpreter; KEEP_BIG=1 keeps the
# big trace at BIG).
set -eu
OUTDIR=${1:?OUTDIR}
BEFORE=${2:-}
PY=${PY:-python3}
TARGET_MB=${TARGET_MB:-850}
SMALL_STEPS=${SMALL_STEPS:-2}
BIG=${BIG:-/tmp/gputui-big.pt.trace.json}
mkdir -p "$OUTDIR"
echo "cpus: $(nproc), $(lscpu | sed -n 's/^Model name: *//p')"
small="$OUTDIR/gpt2_shapes_stack.pt.trace.json"
"$PY" bench/jobs/big_trace.py "$SMALL_STEPS" "$small" | tee "$OUTDIR/small.json"
bytes=$(stat -c %s "$small")
steps=$(( (TARGET_MB * 1000000 * SMALL_STEPS + bytes - 1) / bytes ))
echo "steps for ${TARGET_MB} MB: $steps"
gzip -9 -f "$small"
"$PY" bench/jobs/big_trace.py "$steps" "$BIG" | tee "$OUTDIR/big.json"
args=(--file "$BIG" --no-hta --rounds 2 --out "$OUTDIR/bench_big.json")
[ -n "$BEFORE" ] && args+=(--before "$BEFORE")
"$PY" bench/bench_analyze.py "${args[@]}"
"$PY" -m gputui analyze "$BIG" > "$OUTDIR/big_report.txt" 2>&1 || true
[ -n "${KEEP_BIG:-}" ] || rm -f "$BIG"
