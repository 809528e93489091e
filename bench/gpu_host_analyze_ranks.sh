#!/usr/bin/env bash
# `gputui analyze` on the ranks of a job, on a many-core GPU host: 8 rank files of
# 200 MB of JSON each (a real H100 trace tiled, bench/bench_analyze.py --ranks),
# read with --jobs 1, 2, 4 and 8, against one rank alone; wall time and the peak
# of the RSS summed over gputui and its worker processes.  The target: 8 ranks
# with 8 workers in at most 3x the time of one rank, on a 16-core host.  It needs
# no GPU, only the cores (and about 3 GB of disk and 8 GB of memory).
#
#     bash bench/gpu_host_analyze_ranks.sh OUT.json
#
# Run from the repository root, with the project's environment (.venv) installed.
set -eu
OUT=${1:?OUT.json}
PY=${PY:-.venv/bin/python}
echo "cpus: $(nproc), $(lscpu | sed -n 's/^Model name: *//p')"
"$PY" bench/bench_analyze.py --no-hta --ranks 8 --rank-mb 200 --jobs-list 1 2 4 8 \
    --rounds 2 --out "$OUT"
