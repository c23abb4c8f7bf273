#!/usr/bin/env bash
# Issue 17's GPU checks in one command, for a machine with a CUDA GPU and torch but without dynascope's
# other dependencies and without a network (a lent GPU machine): wheels for what its image lacks travel in
# .whl/ (docs/gpu.md, "Running the GPU checks"). Everything is logged to $OUT/gpu_check.log (default
# ./gpu-check-out), each part's JSON beside it; each part has a time limit of its own (the whole run
# stays under about 7 minutes) and a part that fails or runs out of time does not stop the next.
#
#   bash benchmarks/gpu_validation/gpu_check.sh [probe] [tests] [validate] [bench]   (none named: all four;
#                                                                                    from the repository root)
#
# probe: what CUPTI hands dynascope, raw (gpu_probe.py beside this script: thread ids, correlation ids
#        of cudaLaunchKernel / cuLaunchKernel / cudaGraphLaunch, clock alignment)
# tests: the `gpu`-marked tests (tests/capture/test_device.py)
# validate: validate_gpu.py beside this script, ResNet-18 and GPT-2 each in a process (and a JSON) of its own
# bench: benchmarks/bench_gpu.py, traced against untraced steps and torch.profiler (a launch-bound step)
# named only: cudagraph (gpu_cudagraph.py beside this script: reduce-overhead training loops, plain and traced),
#   bench-gpu-bound (the bench with batch 8192, a step the GPU's work bounds)
set -u -o pipefail
OUT=${OUT:-gpu-check-out}
mkdir -p "$OUT"
LOG=$OUT/gpu_check.log
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
if [ -d "$WHEELS" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks
else
    export PYTHONPATH=$PWD/src:$PWD/benchmarks
fi
export PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/gpu-check-inductor}

# run LIMIT NAME CMD...: the command under a time limit, its output in the log, its status and seconds after
run() {
    local limit=$1 name=$2 start=$SECONDS rc
    shift 2
    echo "=== $name (limit ${limit}s): $*" | tee -a "$LOG"
    timeout -k 5 "$limit" "$@" 2>&1 | grep --line-buffered -v '^USDT:' | tee -a "$LOG"
    rc=$?
    echo "=== $name: exit $rc after $((SECONDS - start))s" | tee -a "$LOG"
    [ $rc -eq 0 ] || status=1
}

status=0
{
    date -u
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
} 2>&1 | tee -a "$LOG"
$PY - <<'EOF' 2>&1 | tee -a "$LOG"
import platform, sys
print("python", platform.python_version(), sys.executable)
for name in ("torch", "triton", "numpy", "numba", "llvmlite", "polars", "orjson", "isal", "rich", "jinja2"):
    try:
        module = __import__(name)
        print(name, getattr(module, "__version__", "?"), getattr(module, "__file__", ""))
    except Exception as exc:  # noqa: BLE001
        print(name, "FAILED:", type(exc).__name__, exc)
import torch
print("cuda", torch.version.cuda, "| available", torch.cuda.is_available(),
      "|", torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU")
import dynascope.trace.writer  # the numba-compiled formatter loads here
print("dynascope imports")
EOF
parts=${*:-probe tests validate bench}
for part in $parts; do
    case $part in
    probe) run 40 probe $PY benchmarks/gpu_validation/gpu_probe.py --out "$OUT/gpu_probe.json" ;;
    tests) run 90 tests $PY -m pytest -m gpu -q tests/capture/test_device.py ;;
    validate)
        run 105 validate-resnet18 $PY benchmarks/gpu_validation/validate_gpu.py --model resnet18 --steps 5 --out "$OUT/validate_resnet18.json"
        run 80 validate-gpt2 $PY benchmarks/gpu_validation/validate_gpu.py --model gpt2 --steps 5 --out "$OUT/validate_gpt2.json" ;;
    cudagraph) run 80 cudagraph $PY benchmarks/gpu_validation/gpu_cudagraph.py --out "$OUT/gpu_cudagraph.json" ;;
    bench-gpu-bound) run 100 bench-gpu-bound $PY benchmarks/bench_gpu.py --batch 8192 --steps 20 --repeats 5 --out "$OUT/bench_gpu_b8192.json" ;;
    bench) run 120 bench $PY benchmarks/bench_gpu.py --steps 50 --repeats 7 --out "$OUT/bench_gpu.json" ;;
    *) echo "gpu_check: unknown part '$part' (probe, tests, validate, bench, cudagraph, bench-gpu-bound)"; exit 2 ;;
    esac
done
echo "=== gpu_check: exit $status after ${SECONDS}s" | tee -a "$LOG"
exit $status
