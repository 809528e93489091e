#!/usr/bin/env bash
# The GPU machine's measurements and recordings, by stage, each with its own
# time limit and log under OUT (a stage that fails does not stop the next):
#   ceilings     bench/gpu_ceilings.sh: gputui bench, roofline agreement, their gpu tests
#   gputests     the other gpu-marked tests (captures, hook, memory, exporter, live GPU)
#   agreement    bench/bench_roofline_agreement.py and the ceilings' gpu tests alone
#   clocks       gputui bench again with the SM clock and power sampled every 100 ms
#                (OUT/clocks.csv): what a sustained matmul runs at
#   attach-demo  the embedded attach demo: a bf16 transformer with a 5-step capture
#                with FLOPs and shapes (OUT/attach_demo.jsonl.gz)
#   memory       an attach session of a leaking job with a memory snapshot
#   memsnap      bench/bench_memsnap.py: what recording allocation history costs the job
#   findings     bench/bench_findings.py: the analyzer's cost on this host
#   exporter     bench/bench_exporter.py compare: against nvitop-exporter, on one kept-alive
#                connection and with a new connection per scrape
#   tui          bench/bench_tui.py live in tmux with a bf16 product loop on the GPU (2 rounds
#                of 25 s windows: under 5 minutes with $BEFORE):
#                gputui (and the checkout in $BEFORE, if set) against nvitop and a bare
#                Textual app; each window's RSS by mapping
#   hook-trees   bench/bench_hook_trees.py: the hook of $BEFORE against this one
#
# BEFORE: a directory holding an earlier gputui package (git archive REV gputui).
#
#   bash bench/gpu_session.sh OUT STAGE...
set -uo pipefail
out=${1:?usage: gpu_session.sh OUT STAGE...}
shift
py=${PYTHON:-python3}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
status=0
note() { echo "== $* ($(date +%T))"; }
check() { local rc=$1; echo "rc=$rc"; [ "$rc" -eq 0 ] || status=1; }

for stage in "$@"; do
    note "$stage"
    case $stage in
    ceilings)
        PYTHON=$py timeout 260 bash bench/gpu_ceilings.sh "$out/ceil" >"$out/ceilings.log" 2>&1
        check $?
        tail -n 40 "$out/ceilings.log"
        ;;
    gputests)
        timeout 240 "$py" -m pytest -q -m gpu -p no:cacheprovider -rs \
            tests/integration/test_trace_capture.py tests/integration/test_hook.py \
            tests/integration/test_attach_memory.py tests/integration/test_exporter_gpu.py \
            tests/integration/test_gpu_live.py tests/integration/test_hook_cuda_graph.py \
            >"$out/gputests.log" 2>&1
        check $?
        tail -n 15 "$out/gputests.log"
        ;;
    agreement)
        timeout 200 "$py" bench/bench_roofline_agreement.py >"$out/agreement.log" 2>&1
        check $?
        grep -v Warning "$out/agreement.log" | grep -v _warn_once
        timeout 200 "$py" -m pytest -q -m gpu -p no:cacheprovider -rs \
            tests/integration/test_ceilings_gpu.py >"$out/ceilings-tests.log" 2>&1
        check $?
        tail -n 5 "$out/ceilings-tests.log"
        ;;
    clocks)
        nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \
            --format=csv -lms 100 >"$out/clocks.csv" 2>&1 &
        smi=$!
        XDG_CACHE_HOME="$out/cache" timeout 120 "$py" -m gputui bench --no-cache \
            >"$out/bench-again.txt" 2>&1
        check $?
        kill "$smi" 2>/dev/null
        cat "$out/bench-again.txt"
        ;;
    attach-demo)
        "$py" -m gputui run -- "$py" bench/jobs/train_transformer.py --seconds 72 \
            >"$out/demo-train.log" 2>&1 &
        job=$!
        timeout 90 "$py" bench/record_attach.py "$job" -o "$out/attach_demo.jsonl.gz" \
            --seconds 66 --capture-at 30 --capture-steps 5 --flops \
            --note "$gpu: transformer training (bf16)" >"$out/demo-attach.log" 2>&1
        check $?
        wait "$job"
        tail -n 3 "$out/demo-attach.log" "$out/demo-train.log"
        ;;
    memory)
        "$py" -m gputui run -- "$py" bench/scenarios/memory_growth.py --seconds 40 \
            --leak-mb 0.5 --max-kept-gb 20 >"$out/mem-train.log" 2>&1 &
        job=$!
        timeout 60 "$py" bench/record_attach.py "$job" -o "$out/memory.jsonl.gz" --seconds 32 \
            --capture-at 20 --capture-steps 3 --memory-at 8 --memory-steps 8 \
            --note "$gpu: memory_growth" >"$out/mem-attach.log" 2>&1
        check $?
        wait "$job"
        tail -n 3 "$out/mem-attach.log"
        ;;
    memsnap)
        timeout 200 "$py" bench/bench_memsnap.py --rounds 8 --out "$out/memsnap.json" \
            >"$out/memsnap.log" 2>&1
        check $?
        tail -n 25 "$out/memsnap.log"
        ;;
    findings)
        timeout 120 "$py" bench/bench_findings.py --out "$out/findings.json" \
            >"$out/findings.log" 2>&1
        check $?
        tail -n 25 "$out/findings.log"
        ;;
    exporter)
        timeout 300 "$py" bench/bench_exporter.py compare --rounds 2 --quiet 30 --scrapes 2000 \
            --load "$py bench/jobs/gpu_load.py --plan bf16mm:900" \
            --json "$out/exporter_compare.json" >"$out/exporter.log" 2>&1
        check $?
        tail -n 30 "$out/exporter.log"
        ;;
    tui)
        "$py" bench/jobs/gpu_load.py --plan bf16mm:300 >"$out/tui-load.log" 2>&1 &
        load=$!
        sleep 5
        timeout 285 "$py" bench/bench_tui.py live ${BEFORE:+--tree "before=$BEFORE" --tree after=.} \
            --bare --seconds 25 --rounds 2 --out "$out/tui_live.json" >"$out/tui.log" 2>&1
        check $?
        kill "$load" 2>/dev/null
        grep -v '^ ' "$out/tui.log" | tail -n 12
        ;;
    hook-trees)
        timeout 540 "$py" bench/bench_hook_trees.py --tree "before=${BEFORE:?set BEFORE}" \
            --tree after=. --rounds 2 --out "$out/hook_trees.json" \
            -- --cycles 300 --tf-cycles 12 >"$out/hook-trees.log" 2>&1
        check $?
        tail -n 12 "$out/hook-trees.log"
        ;;
    *) echo "unknown stage $stage"; status=2 ;;
    esac
done
# the device tool brings back a few files only: one archive of everything
tar czf "$out.tgz" -C "$out" . && mv "$out.tgz" "$out/session.tgz"
note "done: status $status"
exit $status
