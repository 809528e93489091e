#!/usr/bin/env bash
# The analyzer's planted jobs on a GPU machine, in one run (python3 with torch):
#   $OUT/profiler_cost.jsonl   a step unprofiled, profiled, and with shapes and FLOPs
#   $OUT/traces.tgz            torch.profiler traces of the cases (tr/), with shapes (trs/)
#   $OUT/attach.tgz            attach sessions of cases run under `gputui run`: steps,
#                              memory, the job's GPU, one 3-step capture with FLOPs, the
#                              Python profile
#   $OUT/logs.tgz              every job's and recorder's output
#   bash bench/gpu_v3.sh [SECONDS]
set -uo pipefail
seconds=${1:-26}
out=${OUT:?set OUT}
work=$(mktemp -d)
mkdir -p "$work/tr" "$work/trs" "$work/attach" "$work/logs"
py=python3
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
if [ "${PROFILER_CASES:-}" != none ]; then
    $py bench/jobs/profiler_cost.py ${PROFILER_CASES:-healthy inference item_in_forward leak numpy_preproc} \
        >"$out/profiler_cost.jsonl" 2>"$work/logs/profiler_cost.err"
fi
# none: no cases of that kind
for c in ${TRACE_CASES:-compiled_item item_in_forward_wide healthy cpu_randn}; do
    [ "$c" = none ] && continue
    timeout 200 $py bench/jobs/analyzer_cases.py "$work/tr" $c >>"$work/logs/traces.log" 2>&1
done
for c in ${SHAPES_CASES:-sdpa_mem_efficient sdpa_math hand_attention healthy inference}; do
    [ "$c" = none ] && continue
    timeout 200 $py bench/jobs/analyzer_cases.py --shapes "$work/trs" $c >>"$work/logs/traces.log" 2>&1
done
# a case as CASE or CASE:SECONDS (a job that compiles first wants longer)
for spec in ${LIVE_CASES:-slow_workers item_in_forward_wide compiled_item inference leak healthy}; do
    c=${spec%%:*}
    s=$seconds
    [ "$c" != "$spec" ] && s=${spec#*:}
    $py -m gputui run -- $py bench/jobs/analyzer_cases.py --live "$s" $c \
        >"$work/logs/$c.run.log" 2>&1 &
    job=$!
    $py bench/record_attach.py "$job" -o "$work/attach/$c.jsonl.gz" --gpu --flops \
        --seconds $((s - 6)) --capture-at $((s / 2)) --capture-steps 3 \
        --profile-at $((s - 8)) --note "$gpu: planted case $c" \
        >"$work/logs/$c.attach.log" 2>&1
    wait "$job"
done
tar czf "$out/traces.tgz" -C "$work" tr trs
tar czf "$out/attach.tgz" -C "$work" attach
tar czf "$out/logs.tgz" -C "$work" logs
ls -la "$work"/tr "$work"/trs "$work"/attach
tail -n 3 "$work"/logs/*.attach.log
