#!/usr/bin/env bash
# DDP with NCCL on two GPUs under gputui: the rank view's report of each job,
# each with a synchronized capture whose per-rank traces come back for HTA
# (bench/hta_agreement.py, tests/integration/test_hta_truth.py).
#
#     bash bench/gpu_ranks_nccl.sh OUT_DIR [CASE...]
#
# Cases (default: all):
#   healthy    a small MLP, every rank alike
#   slow       the same with rank 1 slower in its data loading (a straggler)
#   overlap    8 layers of 4096 (118 M parameters, 0.47 GB of gradients), DDP's
#              25 MB buckets: the all-reduce runs during backward
#   nooverlap  the same model in one bucket larger than every gradient: the
#              all-reduce starts when backward has ended
#   bigslow    the big model with rank 1 slower in its data loading
#   lightning  the big model in a Lightning Trainer (strategy="ddp"), rank 1 slower
#   hf         a small GPT-2 in a Hugging Face Trainer (bf16), rank 1 slower
# Optional, by environment:
#   RECORD_RANKS=CASE   also record that case's rank session (bench/record_ranks.py,
#                       one synchronized capture) to OUT_DIR/ranks-CASE.jsonl.gz
#   EXPORTER=CASE       scrape the exporter during that case: OUT_DIR/metrics-CASE.txt
#   MONITOR=FILE        record the monitor's session (gputui record) across all cases
set -u
OUT=${1:?OUT_DIR}
shift
CASES=${*:-healthy slow overlap nooverlap bigslow lightning hf}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
# NCCL's multicast paths stay off on these machines
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TORCHRUN=$(dirname "$(command -v python3)")/torchrun
DDP="bench/jobs/train_ddp_cpu.py --device cuda --steps 0"
BIG="--layers 8 --width 4096 --batch 256"

args_of() {
    case $1 in
        healthy) echo "$DDP --data-sleep 0.002" ;;
        slow) echo "$DDP --data-sleep 0.002 --slow-rank 1 --slow-data-s 0.02" ;;
        overlap) echo "$DDP $BIG --data-sleep 0.002" ;;
        nooverlap) echo "$DDP $BIG --data-sleep 0.002 --bucket-cap-mb 100000" ;;
        bigslow) echo "$DDP $BIG --data-sleep 0.002 --slow-rank 1 --slow-data-s 0.02" ;;
        lightning) echo "bench/jobs/lightning_ddp.py --steps 0 $BIG --slow-rank 1 --slow-data-s 0.02" ;;
        hf) echo "bench/jobs/hf_ddp.py --steps 0 --slow-rank 1 --slow-data-s 0.02" ;;
        *) echo "unknown case $1" >&2; return 1 ;;
    esac
}

run_case() {  # NAME
    local name=$1 args
    args=$(args_of "$name") || return 1
    export XDG_CACHE_HOME=/tmp/cache-$name
    # shellcheck disable=SC2086
    python3 -m gputui run -- "$TORCHRUN" --standalone --nproc-per-node=2 \
        $args > "$OUT/$name.log" 2>&1 &
    local launcher=$!
    for _ in $(seq 90); do
        n=$(python3 -m gputui ls --json 2>/dev/null | python3 -c \
            "import json,sys; d=json.load(sys.stdin); print(len(d[0].get('ranks', [])) if d else 0)" 2>/dev/null)
        [ "${n:-0}" -ge 2 ] && break
        sleep 1
    done
    sleep 12  # enough ordinary steps for the rank rules
    if [ "${EXPORTER:-}" = "$name" ]; then
        python3 -m gputui exporter --listen 127.0.0.1 --port 9461 2> "$OUT/exporter-$name.err" &
        local exporter=$!
        sleep 8
        python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:9461/metrics', timeout=20).read().decode())" \
            > "$OUT/metrics-$name.txt" 2>&1
        kill -TERM "$exporter"; wait "$exporter" 2>/dev/null
    fi
    if [ "${RECORD_RANKS:-}" = "$name" ]; then
        timeout 120 python3 bench/record_ranks.py "$launcher" -o "$OUT/ranks-$name.jsonl.gz" \
            --seconds 30 --capture-at 10 > "$OUT/ranks-$name.err" 2>&1
    fi
    timeout 150 python3 -m gputui attach "$launcher" --once --capture 3 --json > "$OUT/$name.json" 2>"$OUT/$name.err"
    COLUMNS=100 timeout 150 python3 -m gputui attach "$launcher" --once > "$OUT/$name.txt" 2>&1
    nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader > "$OUT/$name.smi"
    kill -TERM "$launcher"; wait "$launcher" 2>/dev/null
    (cd "/tmp/cache-$name" 2>/dev/null && find . -name '*.pt.trace.json*' | head -4 | tar cf "$OUT/$name-traces.tar" -T -) || true
}

nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv,noheader
nvidia-smi topo -m
if [ -n "${MONITOR:-}" ]; then
    python3 -m gputui record -o "$MONITOR" --interval 1 --duration 900 --quiet \
        --note "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x2: DDP with NCCL (hooked ranks)" \
        2> "$OUT/monitor.err" &
    monitor=$!
fi
for c in $CASES; do
    echo "== $c $(date -u +%T)"
    run_case "$c"
done
if [ -n "${MONITOR:-}" ]; then
    kill -TERM "$monitor"; wait "$monitor" 2>/dev/null
fi
ls -la "$OUT"
