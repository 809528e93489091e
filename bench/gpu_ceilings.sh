#!/usr/bin/env bash
# Measured ceilings and the roofline on a GPU machine, in one go (~2 minutes):
#   gpu.csv            the GPU, its driver, clocks and power limit (nvidia-smi)
#   bench.json         gputui bench --json (the full run, saved to the cache too)
#   bench.txt          the same results as gputui prints them (gputui bench --cached)
#   quick.json         gputui bench --quick --json, not saved
#   monitor.jsonl.gz   a 0.5 s monitor recording during both (clocks, power, throttling)
#   agreement.txt      bench/bench_roofline_agreement.py: profiler vs CUDA events
#   pytest.txt         the gpu-marked tests of the ceilings and the roofline rows
#
#   PYTHON=/path/to/python bash bench/gpu_ceilings.sh OUTDIR
set -uo pipefail
out=${1:?usage: gpu_ceilings.sh OUTDIR}
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export XDG_CACHE_HOME="$out/cache"  # leave the user's own saved results alone
status=0
step() { echo "== $* ($(date +%T))"; }

step "python"
"$py" -c 'import sys, torch; print(sys.executable, "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
nvidia-smi --query-gpu=name,uuid,driver_version,pstate,clocks.max.sm,clocks.max.mem,power.limit \
    --format=csv | tee "$out/gpu.csv"

recorder=
if "$py" -c 'import pynvml, psutil' 2>/dev/null; then
    "$py" -m gputui record -o "$out/monitor.jsonl.gz" --interval 0.5 --duration 150 --quiet \
        --note "gputui bench run" >"$out/record.log" 2>&1 &
    recorder=$!
    sleep 2
fi

step "gputui bench --json (full)"
timeout 120 "$py" -m gputui bench --json >"$out/bench.json" 2>"$out/bench.err"
rc=$?; echo "rc=$rc"; [ $rc -eq 0 ] || { status=1; cat "$out/bench.err"; }
"$py" -m gputui bench --cached | tee "$out/bench.txt"

step "gputui bench --quick --json --no-cache"
timeout 60 "$py" -m gputui bench --quick --json --no-cache >"$out/quick.json" 2>"$out/quick.err"
rc=$?; echo "rc=$rc"; [ $rc -eq 0 ] || { status=1; cat "$out/quick.err"; }
"$py" - "$out/quick.json" <<'EOF'
import json, sys
try:
    doc = json.load(open(sys.argv[1]))
except Exception as exc:
    sys.exit(f"no quick results: {exc}")
for m in doc["measurements"]:
    value = "-" if m["value"] is None else f"{m['value']:.2f} {m['unit']}"
    print(f"  {m['label']:<30} {value:>16}  {m['error'] or ''}")
print(f"  took {doc['elapsed_s']} s")
EOF

if [ -n "$recorder" ]; then
    kill -INT "$recorder" 2>/dev/null
    wait "$recorder" 2>/dev/null
fi

step "roofline agreement: profiler vs CUDA events"
timeout 180 "$py" bench/bench_roofline_agreement.py 2>&1 | tee "$out/agreement.txt"
rc=${PIPESTATUS[0]}; echo "rc=$rc"; [ $rc -eq 0 ] || status=1

step "gpu tests"
if "$py" -c 'import pytest' 2>/dev/null; then
    timeout 300 "$py" -m pytest -q -m gpu -p no:cacheprovider \
        tests/integration/test_ceilings_gpu.py 2>&1 | tail -n 30 | tee "$out/pytest.txt"
    rc=${PIPESTATUS[0]}; echo "rc=$rc"; [ $rc -eq 0 ] || status=1
else
    echo "pytest is not installed for $py: skipped" | tee "$out/pytest.txt"
fi
step "done: status $status"
exit $status
