#!/usr/bin/env bash
# The project's GPU check, run on an H200 from the repository root.
#
#   bench/h200.sh tests                 the GPU test suite (pytest -m gpu; TESTS_K=EXPR selects with -k)
#   bench/h200.sh search SIZE:TRIALS[:DTYPE[:OBJECTIVE]]...  searches, e.g. 4096:150 1024:100:f16
#                                       4096:60:f16:pareto (f32 and time by default; SEARCH_TIMEOUT=S
#                                       limits each search to S seconds)
#   bench/h200.sh ladder DTYPE:SIZE...  the optimisation ladder, e.g. f16:4096 f32:4096
#   bench/h200.sh energy DTYPE:SIZE...  energy of the best config and cuBLAS, 5 windows each
#   bench/h200.sh ratio DTYPE:SIZE...   the best config against cuBLAS, 10 rounds, which goes first alternating
#   bench/h200.sh mismatch              `autotune search --gpu t4` must fail with one line
#   bench/h200.sh import FILE...        load tuned-results files (e.g. tuned_db/h200.jsonl) into the database
#   bench/h200.sh throughput [DTYPE:SIZE:TRIALS:TARGET...]  GPU evaluations per second of whole searches
#                                       from a cold compile cache and a fresh database (default: SGEMM 4096
#                                       and 1024, HGEMM 4096, 100 evaluations each; bench/throughput.py)
#
# Several modes may follow each other. Logs and the results database go to
# $OUT (default bench/out); bench/summarize.py turns the database into the
# committed report under bench/results/.
set -uo pipefail
OUT=${OUT:-bench/out}
mkdir -p "$OUT"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 AUTOTUNE_CACHE=${AUTOTUNE_CACHE:-/tmp/autotune-cache}
DB="sqlite:///$(realpath "$OUT")/results.db"
status=0

{
    date -u +"date: %Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader | sed 's/^/gpu: /'
    python3 -c 'import sys, cupy; from cupy.cuda import nvrtc, runtime; print("python:", sys.version.split()[0]); print("cupy:", cupy.__version__); print("cuda runtime:", runtime.runtimeGetVersion()); print("nvrtc:", nvrtc.getVersion())'
} | tee "$OUT/environment.txt"

while [ $# -gt 0 ]; do
    mode=$1; shift
    case $mode in
    tests)
        python3 -m pytest -m gpu -q -p no:cacheprovider ${TESTS_K:+-k "$TESTS_K"} tests 2>&1 | tee "$OUT/gpu_tests.log" || status=1
        ;;
    search)
        while [ $# -gt 0 ] && [[ $1 == *:* ]]; do
            IFS=: read -r size trials dtype objective <<< "$1"; shift
            dtype=${dtype:-f32}; objective=${objective:-time}
            python3 -m autotune search --gpu h200 --shape "$size" --dtype "$dtype" --trials "$trials" \
                --objective "$objective" ${SEARCH_TIMEOUT:+--timeout "$SEARCH_TIMEOUT"} --db "$DB" 2>&1 | tee "$OUT/search_${dtype}_${size}_$objective.log" || status=1
        done
        ;;
    ladder|energy|ratio)
        case $mode in
        ladder) command=(python3 -m autotune ladder --gpu h200) ;;
        energy) command=(python3 bench/energy_repeat.py --times 5) ;;
        ratio) command=(python3 bench/ratio_repeat.py --rounds 10) ;;
        esac
        while [ $# -gt 0 ] && [[ $1 == *:* ]]; do
            IFS=: read -r dtype size <<< "$1"; shift
            "${command[@]}" --shape "$size" --dtype "$dtype" --db "$DB" 2>&1 | tee "$OUT/${mode}_${dtype}_$size.log" || status=1
        done
        ;;
    import)
        while [ $# -gt 0 ] && [[ $1 == *.jsonl ]]; do
            python3 -m autotune results import "$1" --db "$DB" 2>&1 | tee -a "$OUT/import.log" || status=1
            shift
        done
        ;;
    throughput)
        cases=()
        while [ $# -gt 0 ] && [[ $1 == *:*:*:* ]]; do cases+=("$1"); shift; done
        python3 bench/throughput.py --out "$OUT" ${cases[@]+"${cases[@]}"} 2>&1 | tee "$OUT/throughput.txt" || status=1
        ;;
    mismatch)
        python3 -m autotune search --gpu t4 --shape 4096 --dtype f32 --trials 1 --db "$DB" > "$OUT/mismatch.log" 2>&1
        echo "exit code $?" >> "$OUT/mismatch.log"
        cat "$OUT/mismatch.log"
        ;;
    *)
        echo "unknown mode $mode: expected tests, search SIZE:TRIALS[:DTYPE[:OBJECTIVE]]..., ladder DTYPE:SIZE..., energy DTYPE:SIZE..., ratio DTYPE:SIZE..., import FILE..., throughput [DTYPE:SIZE:TRIALS:TARGET...], mismatch" >&2; exit 2
        ;;
    esac
done
exit $status
