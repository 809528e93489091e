#!/usr/bin/env bash
# Record the embedded demo on a GPU machine: a real PyTorch training job started
# with the gputui hook, plus a second GPU process that goes through memory-bound,
# FP32 (no tensor cores) and idle phases.  The training job's data loader is made
# slow for a while, so the recording also shows a data-starved GPU.
#
#   bash bench/record_demo.sh [OUT] [SECONDS]
set -euo pipefail
out=${1:-gputui/data/demo.jsonl.gz}
seconds=${2:-240}
py=${PYTHON:-python3}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
logs=$(mktemp -d)

$py -m gputui run -- $py bench/jobs/train_transformer.py \
    --seconds $((seconds - 20)) --starve 150:180 >"$logs/train.log" 2>&1 &
train=$!
(sleep 40 && exec $py bench/jobs/gpu_load.py --plan elementwise:40,fp32mm:40,bf16mm:20,idle:10) \
    >"$logs/load.log" 2>&1 &
load=$!

if [ -n "${ATTACH_OUT:-}" ]; then
    # Also record an attach session with the training job, with one capture.
    $py bench/record_attach.py $train -o "$ATTACH_OUT" --seconds 70 --capture-at 30 \
        --note "$name: transformer training (bf16)" >"$logs/attach.log" 2>&1 &
fi
$py -m gputui record -o "$out" --interval 1 --duration "$seconds" --quiet \
    --note "$name: transformer training (bf16, hooked) + a second GPU process"
wait $train || { echo "training job failed:"; cat "$logs/train.log"; }
wait $load || { echo "load job failed:"; cat "$logs/load.log"; }
wait
tail -n 3 "$logs"/*.log
ls -la "$out"
