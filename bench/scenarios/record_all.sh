#!/usr/bin/env bash
# Run every planted-bottleneck scenario on a GPU machine and keep what gputui and
# torch.profiler saw of it:
#   attach/NAME.jsonl.gz   an attach session (live steps, memory, one 3-step capture)
#                          of the scenario started with `gputui run`
#   traces/NAME/...        a torch.profiler trace of 3 steps (tensorboard_trace_handler)
#   hooktraces/...         the Chrome traces gputui's captures wrote
#   monitor.jsonl.gz       a monitor recording of the whole run (GPM, clocks, power)
#
#   bash bench/scenarios/record_all.sh WORKDIR [SECONDS] [SCENARIO...]
set -uo pipefail
work=${1:?usage: record_all.sh WORKDIR [SECONDS] [SCENARIO...]}
seconds=${2:-24}
shift 2 || shift $#
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(healthy dataloader host_sync launch_bound pageable_copy fp32_matmul elementwise memory_growth)
py=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work/attach" "$work/traces" "$work/hooktraces" "$work/logs"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)

args_for() {
    case $1 in
    memory_growth) echo "--leak-mb 0.5 --max-kept-gb 20" ;;
    *) echo "" ;;
    esac
}

# the attach session of the leaking job also takes a memory snapshot (key m's)
attach_args_for() {
    case $1 in
    memory_growth) echo "--memory-at $((seconds / 4)) --memory-steps 8" ;;
    *) echo "" ;;
    esac
}

total=$(( (seconds + 14) * ${#scenarios[@]} + 10 ))
$py -m gputui record -o "$work/monitor.jsonl.gz" --interval 0.5 --duration "$total" --quiet \
    --note "$gpu: planted-bottleneck scenarios ${scenarios[*]}" >"$work/logs/record.log" 2>&1 &
recorder=$!

for s in "${scenarios[@]}"; do
    echo "== $s $(date +%T)"
    # shellcheck disable=SC2046
    $py -m gputui run -- $py "$here/$s.py" --seconds "$seconds" $(args_for "$s") \
        >"$work/logs/$s.run.log" 2>&1 &
    job=$!
    # shellcheck disable=SC2046
    $py bench/record_attach.py "$job" -o "$work/attach/$s.jsonl.gz" $(attach_args_for "$s") \
        --seconds $((seconds - 8)) --capture-at $((seconds / 2)) --capture-steps 3 \
        --note "$gpu: scenario $s" >"$work/logs/$s.attach.log" 2>&1
    wait "$job"
    tail -n 2 "$work/logs/$s.run.log" "$work/logs/$s.attach.log"
    # shellcheck disable=SC2046
    timeout 120 $py "$here/$s.py" --steps 15 --profile-dir "$work/traces/$s" $(args_for "$s") \
        >"$work/logs/$s.profile.log" 2>&1
    tail -n 1 "$work/logs/$s.profile.log"
done
for s in healthy fp32_matmul; do
    timeout 120 $py "$here/$s.py" --steps 15 --flops --profile-dir "$work/traces/${s}_flops" \
        >"$work/logs/${s}_flops.log" 2>&1
    tail -n 1 "$work/logs/${s}_flops.log"
done
kill -INT "$recorder" 2>/dev/null
wait "$recorder"
cp "${XDG_CACHE_HOME:-$HOME/.cache}"/gputui/traces/*.json "$work/hooktraces/" 2>/dev/null
gzip -f "$work"/hooktraces/*.json 2>/dev/null
du -sh "$work"/*
