#!/usr/bin/env bash
# The project's GPU check, run on an H200 from the repository root.
#
#   bench/h200.sh tests                 the GPU test suite (pytest -m gpu, in one process; TESTS_K=EXPR selects with -k;
#                                       TESTS_PART=I/N runs every N-th file of GPU tests from the I-th: the whole suite
#                                       takes about 500 s, so TESTS_PART=1/2 and 2/2 fit two calls)
#   bench/h200.sh search SIZE:TRIALS[:DTYPE[:OBJECTIVE[:LAYOUT]]]...  searches, e.g. 4096:150 1024:100:f16
#                                       4096:60:f16:pareto 4096:60:f16:time:nt (f32, time and row by default;
#                                       SEARCH_TIMEOUT=S limits each search to S seconds; SEARCH_FAMILY=NAME searches one
#                                       family; SEARCH_PIN="KNOB=V[,V] ..." pins knobs of it; the 3 fastest kernels per
#                                       problem and cuBLAS exported to $OUT/search_results.jsonl)
#   bench/h200.sh ladder DTYPE:SIZE...  the optimisation ladder, e.g. f16:4096 f32:4096
#   bench/h200.sh energy DTYPE:SIZE...  energy of the best config and cuBLAS, 5 windows each
#   bench/h200.sh ratio DTYPE:SIZE[:CONFIG]...  the best config (or the config named) against cuBLAS, 10 rounds,
#                                       which goes first alternating
#   bench/h200.sh part-costs DTYPE:SIZE:CONFIG...  an hgemm_wgmma config with its epilogue left out and at M grown
#                                       to fill whole waves, against itself and cuBLAS, PART_ROUNDS rounds (default 5;
#                                       bench/part_costs.py)
#   bench/h200.sh compilers [CONFIG...]  the public 128x256x8 SGEMM (a salykova/sgemm.cu checkout in PUBLIC_SGEMM,
#                                       default .sgemm.cu; skipped with a message where there is none) and sgemm configs
#                                       (default: the 4096 best), each built by NVRTC and by nvcc, verified and timed
#                                       against cuBLAS at 4096 in COMPILERS_ROUNDS rounds (default 14; bench/sgemm_compilers.py)
#   bench/h200.sh mismatch              `autotune search --gpu t4` must fail with one line
#   bench/h200.sh import FILE...        load tuned-results files (e.g. tuned_db/h200.jsonl) into the database
#   bench/h200.sh runtime               export the shipped H200 table (--format python) and run
#                                       bench/runtime_check.py with it: 25 shapes per dtype (f32, f16, bf16) and 15 of x @ W.T against cuBLAS
#                                       (CHECK_SHAPES=SET: that shape set's shapes instead, e.g. llm-held-out, for
#                                       every dtype and as x @ W.T; `cudalib` takes it too; CHECK_BETA=B times
#                                       c = a @ b + B * c instead of beta 0)
#   bench/h200.sh warm-timing           the table's kernel against cuBLAS at a few MLP shapes and squares, L2 flushed
#                                       (as searches time) and back to back (as a model runs), and a profile of the
#                                       runtime's host time per call (bench/warm_timing.py)
#   bench/h200.sh first-call            the runtime's first autotune.gemm in a fresh process (f32 and f16 at
#                                       FIRST_CALL_SHAPE, default 4096; an empty disk cache, then a warm one)
#                                       against the later calls (bench/first_call.py)
#   bench/h200.sh retime                the shipped results imported, then `autotune retime` for each DTYPE:LAYOUT of
#                                       RETIME_RUNS (default f16:row bf16:row f16:nt bf16:nt f32:row): each tuned shape's
#                                       RETIME_TOP (default 3) fastest configs and cuBLAS measured again, flushed and back
#                                       to back, RETIME_ROUNDS (default 5) rounds; configs measured both ways before are
#                                       skipped (RETIME_TIMEOUT=S stops each run after S seconds); the rounds
#                                       exported to $OUT/retime_results.jsonl (append them to tuned_db/h200.jsonl to ship
#                                       them). `runtime` with RUNTIME_DB=1 then checks the table of $DB, not the shipped one
#   bench/h200.sh tune-on-miss          autotune.tune_on_miss at a shape nobody tuned (TUNE_SHAPE, default 3072^3,
#                                       TUNE_DTYPE f32, TUNE_LAYOUT row (nt: x @ W.T), TUNE_TRIALS 30, TUNE_TIMEOUT 60 s): calls go on while the
#                                       background search runs, then move to its table (bench/tune_on_miss.py)
#   bench/h200.sh llama-mlp             examples/llama_mlp: a Llama MLP block (4096 -> 14336 -> 4096) on
#                                       autotune.torch against plain PyTorch, both under torch.compile, for
#                                       LLAMA_MLP_DTYPES (default f16 bf16) at LLAMA_MLP_TOKENS (default 1,16,128,1024,4096);
#                                       LLAMA_MLP_GRAPHS=1: both compiled with mode="reduce-overhead" (CUDA graphs)
#   bench/h200.sh cudalib               export the shipped H200 table as a C library (--format cuda, into
#                                       CUDALIB_DIR, default $BUILD/cudalib, unless it holds one), build it with
#                                       CMake, run its example and bench/export_check.cpp against cuBLAS
#   bench/h200.sh throughput [DTYPE:SIZE:TRIALS:TARGET...]  GPU evaluations per second of whole searches
#                                       from a cold compile cache and a fresh database (default: SGEMM 4096
#                                       and 1024, HGEMM 4096, 100 evaluations each; bench/throughput.py)
#   bench/h200.sh compile-cost [FILE...]  what NVRTC compiles cost on this machine's CPUs: the 4096 search's dear
#                                       sgemm kinds (and any FILE given), alone and 1, 8 and 16 at once
#                                       (bench/compile_cost.py; NVRTC's own cache disabled)
#   bench/h200.sh sweep DTYPE...        the LLM sweep for a table: `autotune sweep --shapes llm`, then
#                                       `--shapes llm-held-out --cross-from llm`, then `autotune retime` of every
#                                       swept shape (SWEEP_ROUNDS rounds, default 3), then `autotune table
#                                       --hold-out llm-held-out` (text and JSON) and `autotune plot`, once
#                                       both sweeps are complete (SWEEP_TRIALS per shape, default 20;
#                                       SWEEP_TOP, default 3; SWEEP_TIMEOUT=S stops each sweep command
#                                       after S seconds: run the mode again with the same $DB to go on;
#                                       SWEEP_LAYOUT=nt sweeps B stored N x K; SWEEP_FAMILY=NAME sweeps one family;
#                                       SWEEP_ROWS=LOW:HIGH only the shapes of LOW to HIGH rows of both sets); the
#                                       database's results exported to $OUT/h200_results.jsonl
#   bench/h200.sh bf16                  a first bf16 table from the shipped fp16 results: imports tuned_db/h200.jsonl,
#                                       then `autotune cross-dtype --dtype bf16 --from-dtype f16`: each shipped f16
#                                       shape's BF16_TOP (default 3) fastest configs built for bf16, verified and timed
#                                       there with cuBLAS bf16 (56 shapes, 168 candidates of 47 distinct configs,
#                                       compiled on the 16 CPUs in about 15 s, and 56 cuBLAS runs: an estimated 2-3
#                                       minutes of the H200, not measured yet; BF16_TIMEOUT=S stops it after S seconds,
#                                       run again with the same $DB to go on); then `autotune table --dtype bf16`
#                                       (text and JSON) and the H200's results, bf16 included, as $OUT/h200.jsonl
#                                       (copy it over tuned_db/h200.jsonl and run `python -m autotune.cli.prebuilt`
#                                       to ship the bf16 table; BF16_LAYOUT=nt does the same from the database's f16 results
#                                       of B stored N x K)
#   bench/h200.sh shared [DEVICES]      searches sharing one study on a throwaway PostgreSQL server, one
#                                       process per entry of DEVICES (default 0,0; bench/shared_study.py).
#                                       Server binaries: initdb and pg_ctl on PATH, or the packed server in
#                                       .pg/postgresql.tgz (a relocatable tree with bin/initdb, bin/pg_ctl)
#   bench/h200.sh cublas-kernels DTYPE:SHAPE...  the kernels cuBLAS runs at each shape (the gemmEx call searches
#                                       time against), their names and time per call (bench/cublas_kernels.py)
#   bench/h200.sh held-out DTYPE:FAMILY:MIN_M:MAX_M...  a search per shape of the held-out set (llm-held-out)
#                                       of MIN_M to MAX_M rows with FAMILY (HELD_OUT_TRIALS per shape, default 150;
#                                       HELD_OUT_TIMEOUT=S stops each sweep after S seconds), cuBLAS beside each, e.g.
#                                       f16:hgemm_wgmma:1:16384 f16:hgemm_gemv:1:16; each shape's 3 best configs
#                                       exported to $OUT/held_out_results.jsonl
#   bench/h200.sh gemv                  sgemm_gemv (M <= 8) swept at the LLM set's shapes of at most 8 rows
#                                       (GEMV_TRIALS per shape, default 40; top 3 kept), its best configs then
#                                       timed at the held-out set's few-row shapes (--cross-from), cuBLAS beside
#                                       each; the results exported to $OUT/gemv_results.jsonl (about 2 minutes)
#   bench/h200.sh hgemv                 hgemm_gemv (M <= 16) swept at the LLM set's shapes of at most 16 rows for each
#                                       DTYPE:LAYOUT of HGEMV_RUNS (default f16:nt f16:row bf16:nt; HGEMV_TRIALS per
#                                       shape, default 24; top 3 kept), its best configs then timed at the held-out
#                                       set's few-row shapes (--cross-from), cuBLAS beside each; the results exported
#                                       to $OUT/hgemv_results.jsonl (12 + 3 shapes per run; not timed yet)
#   bench/h200.sh profile DTYPE:SIZE:CONFIG...  Nsight Compute (ncu) on the config's kernel and on cuBLAS's at SIZE,
#                                       each launched as bench/ratio_repeat.py does (L2 flushed; clocks free, or
#                                       PROFILE_CLOCKS=base: locked at base), into $OUT/profile_DTYPE_SIZE_{kernel,cublas}.txt
#   bench/h200.sh brute-force [NAME]    every feasible config of a sub-space (default wgmma4096: hgemm_wgmma at
#                                       4096^3 f16, 2740 configs) verified and timed, and cuBLAS, into
#                                       $OUT/replay_NAME.jsonl, the table bench/replay.py replays searches over
#                                       (bench/brute_force.py; BRUTE_TIMEOUT=S stops compiling after S seconds,
#                                       default 480: run the mode again with the same $OUT to go on)
#
# Several modes may follow each other. Logs and the results database go to
# $OUT (default bench/out); bench/summarize.py turns the database into the
# committed report under bench/results/.
set -uo pipefail
OUT=${OUT:-bench/out}
BUILD=${BUILD:-$(mktemp -d)}  # exported libraries and their builds: kept out of $OUT, which holds results
mkdir -p "$OUT" "$BUILD"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 AUTOTUNE_CACHE=${AUTOTUNE_CACHE:-/tmp/autotune-cache}
DB=${DB:-"sqlite:///$(realpath "$OUT")/results.db"}
status=0

# The shapes of shape set SET with LOW to HIGH rows (default: all), one MxNxK a line.
shape_lines() {
    python3 -c 'import sys; from autotune.shapes import read_shapes
low, high = int(sys.argv[2]), int(sys.argv[3])
print("".join(f"{m}x{n}x{k}\n" for m, n, k in read_shapes(sys.argv[1]) if low <= m <= high), end="")' \
        "$1" "${2:-1}" "${3:-2147483647}"
}

{
    date -u +"date: %Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader | sed 's/^/gpu: /'
    python3 -c 'import sys, cupy; from cupy.cuda import nvrtc, runtime; print("python:", sys.version.split()[0]); print("cupy:", cupy.__version__); print("cuda runtime:", runtime.runtimeGetVersion()); print("nvrtc:", nvrtc.getVersion())'
    python3 -c 'from autotune.kernel.compile import nvrtc_version; print("autotune nvrtc:", nvrtc_version())'  # what builds the kernels
} | tee "$OUT/environment.txt"

while [ $# -gt 0 ]; do
    mode=$1; shift
    case $mode in
    tests)
        targets=(tests)
        if [ -n "${TESTS_PART:-}" ]; then  # I/N: every N-th file with GPU tests, from the I-th (the suite: about 500 s)
            part=${TESTS_PART%/*} parts=${TESTS_PART#*/}
            mapfile -t files < <(grep -l "mark.gpu" tests/test_*.py | sort)
            targets=()
            for i in "${!files[@]}"; do [ $((i % parts + 1)) = "$part" ] && targets+=("${files[$i]}"); done
        fi
        python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider ${TESTS_K:+-k "$TESTS_K"} "${targets[@]}" 2>&1 | tee "$OUT/gpu_tests.log" || status=1
        ;;
    search)
        while [ $# -gt 0 ] && [[ $1 == *:* ]]; do
            IFS=: read -r size trials dtype objective layout <<< "$1"; shift
            dtype=${dtype:-f32}; objective=${objective:-time}; layout=${layout:-row}
            pins=(); for pin in ${SEARCH_PIN:-}; do pins+=(--pin "$pin"); done
            python3 -m autotune search --gpu h200 --shape "$size" --dtype "$dtype" --layout "$layout" --trials "$trials" \
                --objective "$objective" ${SEARCH_TIMEOUT:+--timeout "$SEARCH_TIMEOUT"} ${SEARCH_FAMILY:+--family "$SEARCH_FAMILY"} \
                "${pins[@]}" --db "$DB" 2>&1 | tee "$OUT/search_${dtype}_${size}_${objective}_$layout.log" || status=1
        done
        python3 -m autotune results export --gpu h200 --per-problem 3 --db "$DB" > "$OUT/search_results.jsonl" || status=1
        ;;
    ladder|energy|ratio|part-costs)
        case $mode in
        ladder) command=(python3 -m autotune ladder --gpu h200 --db "$DB") ;;
        energy) command=(python3 bench/energy_repeat.py --times 5 --db "$DB") ;;
        ratio) command=(python3 bench/ratio_repeat.py --rounds 10 --db "$DB") ;;
        part-costs) command=(python3 bench/part_costs.py --rounds "${PART_ROUNDS:-5}") ;;  # reads no database
        esac
        while [ $# -gt 0 ] && [[ $1 == *:* ]]; do
            IFS=: read -r dtype size config <<< "$1"; shift
            "${command[@]}" --shape "$size" --dtype "$dtype" ${config:+--config "$config"} 2>&1 | tee "$OUT/${mode}_${dtype}_$size${config:+_$config}.log" || status=1
        done
        ;;
    import)
        while [ $# -gt 0 ] && [[ $1 == *.jsonl ]]; do
            python3 -m autotune results import "$1" --db "$DB" 2>&1 | tee -a "$OUT/import.log" || status=1
            shift
        done
        ;;
    runtime)
        source=(--shipped); [ -n "${RUNTIME_DB:-}" ] && source=(--db "$DB")
        python3 -m autotune export --gpu h200 "${source[@]}" --format python --out "$BUILD/export" 2>&1 | tee "$OUT/runtime.log" || status=1
        cp "$BUILD/export/autotune_table_h200.json" "$OUT/runtime_table.json" 2>/dev/null
        python3 bench/runtime_check.py --table "$BUILD/export/autotune_table_h200_with_cubins.json" ${CHECK_SHAPES:+--shapes "$CHECK_SHAPES"} \
            ${CHECK_BETA:+--beta "$CHECK_BETA"} --out "$OUT" 2>&1 | tee -a "$OUT/runtime.log" || status=1
        ;;
    retime)
        python3 -m autotune results import tuned_db/h200.jsonl --db "$DB" 2>&1 | tee -a "$OUT/retime.log" || status=1
        for run in ${RETIME_RUNS:-f16:row bf16:row f16:nt bf16:nt f32:row}; do
            IFS=: read -r dtype layout <<< "$run"
            python3 -m autotune retime --gpu h200 --dtype "$dtype" --layout "$layout" --top "${RETIME_TOP:-3}" \
                --rounds "${RETIME_ROUNDS:-5}" ${RETIME_TIMEOUT:+--timeout "$RETIME_TIMEOUT"} --db "$DB" 2>&1 | tee -a "$OUT/retime.log" || status=1
        done
        python3 -m autotune results export --gpu h200 --db "$DB" 2>> "$OUT/retime.log" | grep -E '"study": "retime(-back-to-back)?"' > "$OUT/retime_results.jsonl"
        ;;
    tune-on-miss)
        python3 bench/tune_on_miss.py --out "$OUT" --shape "${TUNE_SHAPE:-3072x3072x3072}" --dtype "${TUNE_DTYPE:-f32}" \
            --layout "${TUNE_LAYOUT:-row}" --trials "${TUNE_TRIALS:-30}" --timeout "${TUNE_TIMEOUT:-60}" 2>&1 | tee "$OUT/tune_on_miss.log" || status=1
        ;;
    llama-mlp)
        for dtype in ${LLAMA_MLP_DTYPES:-f16 bf16}; do
            name=llama_mlp_$dtype${LLAMA_MLP_GRAPHS:+_cuda_graphs}
            python3 examples/llama_mlp/llama_mlp.py --dtype "$dtype" --tokens "${LLAMA_MLP_TOKENS:-1,16,128,1024,4096}" \
                ${LLAMA_MLP_GRAPHS:+--cuda-graphs} --json "$OUT/$name.json" 2>&1 | tee "$OUT/$name.log" || status=1
        done
        ;;
    warm-timing)
        python3 bench/warm_timing.py --out "$OUT" 2>&1 | tee "$OUT/warm_timing.log" || status=1
        ;;
    first-call)
        python3 bench/first_call.py --out "$OUT" --shape "${FIRST_CALL_SHAPE:-4096}" 2>&1 | tee "$OUT/first_call.log" || status=1
        ;;
    cudalib)
        library=${CUDALIB_DIR:-$BUILD/cudalib}
        if [ ! -f "$library/CMakeLists.txt" ]; then
            python3 -m autotune export --gpu h200 --dtype f32,f16 --shipped --format cuda --out "$library" 2>&1 | tee "$OUT/cudalib.log" || status=1
        fi
        cublas=(-lcublas)  # the toolkit's, else the nvidia-cublas wheel's
        if [ ! -f "${CUDA_HOME:-/usr/local/cuda}/include/cublas_v2.h" ]; then
            wheel=$(python3 -c 'import importlib.util; print(list(importlib.util.find_spec("nvidia.cu13").submodule_search_locations)[0])')
            cublas=(-I"$wheel/include" -L"$wheel/lib" -l:libcublas.so.13 -Xlinker -rpath -Xlinker "$wheel/lib")
        fi
        {
            cmake -S "$library" -B "$BUILD/cudalib_build" -DCMAKE_BUILD_TYPE=Release &&
            cmake --build "$BUILD/cudalib_build" -j 8 &&
            nvcc -O2 -std=c++17 -x cu -arch=sm_90 bench/export_check.cpp -I"$library/include" "${cublas[@]}" \
                -L"$BUILD/cudalib_build" -lautotune_gemm -ldl -lpthread -o "$BUILD/export_check"
        } >> "$OUT/cudalib.log" 2>&1 || { tail -20 "$OUT/cudalib.log"; status=1; continue; }
        if [ -x "$BUILD/cudalib_build/autotune_gemm_example" ]; then
            "$BUILD/cudalib_build/autotune_gemm_example" 2>&1 | tee -a "$OUT/cudalib.log" || status=1
        fi
        shape_file=()
        if [ -n "${CHECK_SHAPES:-}" ]; then
            shape_lines "$CHECK_SHAPES" > "$OUT/check_shapes.txt"
            shape_file=(all "$OUT/check_shapes.txt")
        fi
        "$BUILD/export_check" "$OUT/export_check.csv" ${shape_file[@]+"${shape_file[@]}"} 2>&1 | tee "$OUT/export_check.log" || status=1
        ;;
    throughput)
        cases=()
        while [ $# -gt 0 ] && [[ $1 == *:*:*:* ]]; do cases+=("$1"); shift; done
        python3 bench/throughput.py --out "$OUT" ${cases[@]+"${cases[@]}"} 2>&1 | tee "$OUT/throughput.txt" || status=1
        ;;
    compile-cost)
        sources=()
        while [ $# -gt 0 ] && [ -f "$1" ]; do sources+=("$1"); shift; done
        CUDA_CACHE_DISABLE=1 python3 bench/compile_cost.py --out "$OUT" --probe-nice ${sources[@]+--source "${sources[@]}"} \
            2>&1 | tee "$OUT/compile_cost.log" || status=1
        ;;
    sweep)
        while [ $# -gt 0 ] && [[ $1 == f16 || $1 == f32 ]]; do
            dtype=$1; shift
            layout=${SWEEP_LAYOUT:-row}; name=$dtype${SWEEP_LAYOUT:+_$layout}
            common=(--gpu h200 --dtype "$dtype" --layout "$layout" --trials "${SWEEP_TRIALS:-20}" --top "${SWEEP_TOP:-3}"
                    --db "$DB" ${SWEEP_TIMEOUT:+--timeout "$SWEEP_TIMEOUT"} ${SWEEP_FAMILY:+--family "$SWEEP_FAMILY"})
            log="$OUT/sweep_${name}.log" step="$OUT/sweep_step.log"
            train=llm held_out=llm-held-out
            if [ -n "${SWEEP_ROWS:-}" ]; then  # LOW:HIGH: the shapes of both sets with LOW to HIGH rows
                shape_lines llm "${SWEEP_ROWS%:*}" "${SWEEP_ROWS#*:}" > "$OUT/sweep_shapes.txt"
                shape_lines llm-held-out "${SWEEP_ROWS%:*}" "${SWEEP_ROWS#*:}" > "$OUT/sweep_held_out.txt"
                train=$OUT/sweep_shapes.txt held_out=$OUT/sweep_held_out.txt
            fi
            python3 -m autotune sweep "${common[@]}" --shapes "$train" > "$step" 2>&1 || status=1
            cat "$step" >> "$log"
            grep -q "stopped at --timeout" "$step" && { tail -3 "$step"; continue; }
            python3 -m autotune sweep "${common[@]}" --shapes "$held_out" --cross-from "$train" > "$step" 2>&1 || status=1
            cat "$step" >> "$log"
            grep -q "stopped at --timeout" "$step" && { tail -3 "$step"; continue; }
            python3 -m autotune retime --gpu h200 --dtype "$dtype" --layout "$layout" --rounds "${SWEEP_ROUNDS:-3}" \
                --db "$DB" ${SWEEP_TIMEOUT:+--timeout "$SWEEP_TIMEOUT"} > "$step" 2>&1 || status=1
            cat "$step" >> "$log"
            grep -q "stopped at --timeout" "$step" && { tail -3 "$step"; continue; }
            table=(--gpu h200 --dtype "$dtype" --layout "$layout" --hold-out llm-held-out --db "$DB")
            python3 -m autotune table "${table[@]}" > "$OUT/table_${name}.txt" 2>&1 || status=1
            python3 -m autotune table "${table[@]}" --json > "$OUT/table_${name}.json" 2>> "$log" || status=1
            python3 -m autotune plot "${table[@]}" --out "$OUT" >> "$log" 2>&1 || status=1
            python3 -m autotune results export --gpu h200 --db "$DB" > "$OUT/h200_results.jsonl" 2>> "$log" || status=1
            tail -25 "$OUT/table_${name}.txt"
        done
        ;;
    bf16)
        python3 -m autotune results import tuned_db/h200.jsonl --db "$DB" 2>&1 | tee -a "$OUT/bf16.log" || status=1
        layout=${BF16_LAYOUT:-row}; name=bf16${BF16_LAYOUT:+_$layout}
        python3 -m autotune cross-dtype --gpu h200 --dtype bf16 --from-dtype f16 --layout "$layout" --top "${BF16_TOP:-3}" \
            --db "$DB" ${BF16_TIMEOUT:+--timeout "$BF16_TIMEOUT"} 2>&1 | tee -a "$OUT/$name.log" || status=1
        python3 -m autotune table --gpu h200 --dtype bf16 --layout "$layout" --db "$DB" > "$OUT/table_$name.txt" 2>&1 || status=1
        python3 -m autotune table --gpu h200 --dtype bf16 --layout "$layout" --db "$DB" --json > "$OUT/table_$name.json" 2>> "$OUT/$name.log" || status=1
        python3 -m autotune results export --gpu h200 --db "$DB" > "$OUT/h200.jsonl" 2>> "$OUT/$name.log" || status=1
        tail -25 "$OUT/table_$name.txt"
        ;;
    shared)
        devices=0,0
        if [ $# -gt 0 ] && [[ $1 =~ ^[0-9,]+$ ]]; then devices=$1; shift; fi
        if ! command -v initdb > /dev/null && [ -f .pg/postgresql.tgz ]; then
            mkdir -p /tmp/autotune-pg && tar xzf .pg/postgresql.tgz -C /tmp/autotune-pg && chmod -R a+rX /tmp/autotune-pg
            export PATH=/tmp/autotune-pg/bin:$PATH
        fi
        python3 bench/shared_study.py --out "$OUT" --devices "$devices" ${SHARED_TRIALS:+--trials "$SHARED_TRIALS"} 2>&1 | tee "$OUT/shared_study.txt" || status=1
        ;;
    compilers)
        sources=()
        while [ $# -gt 0 ] && [[ $1 == sgemm_* ]]; do sources+=(--config "$1"); shift; done
        [ ${#sources[@]} -gt 0 ] || sources=(--config sgemm_bm256_bn128_bk8_split_k1_tm16_tn8_warps_m8_pad_a0_pad_b0_vec4_stages2_cp_async0_smem_opt_in0_prefetch0_group_m1_lean_build1_lane_pairs0_copy_spread0)
        public=${PUBLIC_SGEMM:-.sgemm.cu}
        {
            if [ -f "$public/src/kernels/128x256x8.cuh" ]; then
                sources+=(--public "$public")
            else
                echo "compilers: no salykova/sgemm.cu checkout in $public (PUBLIC_SGEMM=DIR names one): the public kernel is skipped"
            fi
            python3 bench/sgemm_compilers.py --shape 4096 --rounds "${COMPILERS_ROUNDS:-14}" "${sources[@]}"
        } 2>&1 | tee "$OUT/compilers.log" || status=1
        ;;
    cublas-kernels)
        cases=()
        while [ $# -gt 0 ] && [[ $1 == *:* ]]; do cases+=("$1"); shift; done
        python3 bench/cublas_kernels.py "${cases[@]}" --out "$OUT" 2>&1 | tee "$OUT/cublas_kernels.log" || status=1
        ;;
    held-out)
        # DTYPE:FAMILY:MIN_M:MAX_M: a search per held-out shape of MIN_M to MAX_M rows
        while [ $# -gt 0 ] && [[ $1 == *:*:*:* ]]; do
            IFS=: read -r dtype family low high <<< "$1"; shift
            shapes="$OUT/held_out_${dtype}_${family}.txt"
            shape_lines llm-held-out "$low" "$high" > "$shapes"
            python3 -m autotune sweep --gpu h200 --dtype "$dtype" --family "$family" --shapes "$shapes" --top 0 \
                --trials "${HELD_OUT_TRIALS:-150}" --db "$DB" ${HELD_OUT_TIMEOUT:+--timeout "$HELD_OUT_TIMEOUT"} \
                2>&1 | tee "$OUT/held_out_${dtype}_${family}.log" || status=1
        done
        python3 -m autotune results export --gpu h200 --per-problem 3 --db "$DB" > "$OUT/held_out_results.jsonl" || status=1
        ;;
    gemv)
        python3 -c 'from autotune.shapes import read_shapes
for name, file in (("llm", "gemv_shapes.txt"), ("llm-held-out", "gemv_held_out.txt")):
    open("'"$OUT"'/" + file, "w").write("".join(f"{m}x{n}x{k}\n" for m, n, k in read_shapes(name) if m <= 8))'
        gemv=(--gpu h200 --dtype f32 --family sgemm_gemv --top 3 --db "$DB")
        python3 -m autotune sweep "${gemv[@]}" --trials "${GEMV_TRIALS:-40}" --shapes "$OUT/gemv_shapes.txt" \
            2>&1 | tee "$OUT/gemv.log" || status=1
        python3 -m autotune sweep "${gemv[@]}" --shapes "$OUT/gemv_held_out.txt" --cross-from "$OUT/gemv_shapes.txt" \
            2>&1 | tee -a "$OUT/gemv.log" || status=1
        python3 -m autotune results export --gpu h200 --per-problem 3 --db "$DB" > "$OUT/gemv_results.jsonl" || status=1
        ;;
    hgemv)
        python3 -c 'from autotune.shapes import read_shapes
for name, file in (("llm", "hgemv_shapes.txt"), ("llm-held-out", "hgemv_held_out.txt")):
    open("'"$OUT"'/" + file, "w").write("".join(f"{m}x{n}x{k}\n" for m, n, k in read_shapes(name) if m <= 16))'
        for run in ${HGEMV_RUNS:-f16:nt f16:row bf16:nt}; do
            IFS=: read -r dtype layout <<< "$run"
            hgemv=(--gpu h200 --dtype "$dtype" --layout "$layout" --family hgemm_gemv --top 3 --db "$DB")
            python3 -m autotune sweep "${hgemv[@]}" --trials "${HGEMV_TRIALS:-24}" --shapes "$OUT/hgemv_shapes.txt" \
                2>&1 | tee -a "$OUT/hgemv_${dtype}_$layout.log" || status=1
            python3 -m autotune sweep "${hgemv[@]}" --shapes "$OUT/hgemv_held_out.txt" --cross-from "$OUT/hgemv_shapes.txt" \
                2>&1 | tee -a "$OUT/hgemv_${dtype}_$layout.log" || status=1
        done
        python3 -m autotune results export --gpu h200 --per-problem 3 --db "$DB" > "$OUT/hgemv_results.jsonl" || status=1
        ;;
    brute-force)
        name=wgmma4096
        if [ $# -gt 0 ] && [[ $1 =~ ^[a-z_]+[0-9]+$ ]]; then name=$1; shift; fi  # sub-space names end in their size
        python3 bench/brute_force.py --out "$OUT" --sub-space "$name" --timeout "${BRUTE_TIMEOUT:-480}" \
            2>&1 | tee -a "$OUT/brute_force_$name.log" || status=1
        ;;
    profile)
        # DTYPE:SIZE:CONFIG: Nsight Compute on the config's kernel and on cuBLAS's at that shape, as
        # bench/ratio_repeat.py runs them (2 rounds, the L2 flushed), clocks left free (as in a real run) unless
        # PROFILE_CLOCKS says otherwise (base: locked at the base clock, for cycle counts that power does not move)
        ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
        if [ -z "$ncu" ]; then echo "profile: no ncu (Nsight Compute) on this machine" | tee "$OUT/profile.log"; status=1; fi
        while [ $# -gt 0 ] && [[ $1 == *:*:* ]]; do
            IFS=: read -r dtype size config <<< "$1"; shift
            [ -n "$ncu" ] || continue
            for side in kernel cublas; do
                filter='regex:^[sh]gemm_'
                if [ $side = cublas ]; then  # f32: the first matches may be the verification's reference GEMM
                    filter='regex:^nvjet'; [ "$dtype" = f32 ] && filter='regex:cutlass|xmma|gemv|splitK'
                fi
                "$ncu" --clock-control "${PROFILE_CLOCKS:-none}" -k "$filter" -c 2 --section SpeedOfLight --section ComputeWorkloadAnalysis \
                    --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
                    --section MemoryWorkloadAnalysis --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__cycles_active.avg,gpc__cycles_elapsed.max \
                    python3 bench/ratio_repeat.py --rounds 2 --shape "$size" --dtype "$dtype" --config "$config" --db "$DB" \
                    > "$OUT/profile_${dtype}_${size}_$side.txt" 2>&1 || status=1
            done
        done
        ;;
    mismatch)
        python3 -m autotune search --gpu t4 --shape 4096 --dtype f32 --trials 1 --db "$DB" > "$OUT/mismatch.log" 2>&1
        echo "exit code $?" >> "$OUT/mismatch.log"
        cat "$OUT/mismatch.log"
        ;;
    *)
        echo "unknown mode $mode: expected tests, search SIZE:TRIALS[:DTYPE[:OBJECTIVE]]..., ladder DTYPE:SIZE..., energy DTYPE:SIZE..., ratio DTYPE:SIZE..., part-costs DTYPE:SIZE:CONFIG..., import FILE..., retime, runtime, first-call, cudalib, throughput [DTYPE:SIZE:TRIALS:TARGET...], sweep DTYPE..., bf16, gemv, hgemv, shared [DEVICES], compilers [CONFIG...], brute-force [NAME], profile DTYPE:SIZE:CONFIG..., mismatch" >&2; exit 2
        ;;
    esac
done
exit $status
