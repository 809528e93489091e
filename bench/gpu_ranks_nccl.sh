#!/usr/bin/env bash
# DDP with NCCL on two GPUs under gputui: the rank view's report of a healthy job
# and of one with a planted slow rank, each with a synchronized capture whose
# per-rank traces come back for HTA (tests/integration/test_hta_truth.py style).
#     bash bench/gpu_ranks_nccl.sh OUT_DIR
set -u
OUT=${1:?OUT_DIR}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
# NCCL's multicast paths stay off on these machines
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TORCHRUN=$(dirname "$(command -v python3)")/torchrun
run_case() {  # NAME ARGS...
    local name=$1; shift
    export XDG_CACHE_HOME=/tmp/cache-$name
    python3 -m gputui run -- "$TORCHRUN" --standalone --nproc-per-node=2 \
        bench/jobs/train_ddp_cpu.py --device cuda --steps 0 "$@" > "/tmp/$name.log" 2>&1 &
    local launcher=$!
    for _ in $(seq 90); do
        n=$(python3 -m gputui ls --json 2>/dev/null | python3 -c \
            "import json,sys; d=json.load(sys.stdin); print(len(d[0].get('ranks', [])) if d else 0)" 2>/dev/null)
        [ "${n:-0}" -ge 2 ] && break
        sleep 1
    done
    sleep 12  # enough ordinary steps for the rank rules
    timeout 150 python3 -m gputui attach "$launcher" --once --capture 3 --json > "$OUT/$name.json" 2>"$OUT/$name.err"
    COLUMNS=100 timeout 150 python3 -m gputui attach "$launcher" --once > "$OUT/$name.txt" 2>&1
    kill -TERM "$launcher"; wait "$launcher" 2>/dev/null
    (cd "/tmp/cache-$name" 2>/dev/null && find . -name '*.pt.trace.json*' | head -4 | tar cf "$OUT/$name-traces.tar" -T -) || true
}
nvidia-smi --query-gpu=index,name --format=csv,noheader
run_case healthy --data-sleep 0.002
run_case slow --data-sleep 0.002 --slow-rank 1 --slow-data-s 0.02
ls -la "$OUT"
