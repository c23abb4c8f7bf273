#!/usr/bin/env bash
# Issue 17's GPU checks in one command, for a machine with a CUDA GPU and torch but without dynascope's
# other dependencies and without a network (a lent GPU machine): wheels for what its image lacks travel in
# .whl/ (docs/gpu.md, "Running the GPU checks"). Each part writes its log and JSON under $OUT (default
# ./gpu-check-out).
#
#   bash benchmarks/gpu_check.sh [tests] [bench] [validate]     (none named: all three)
set -u -o pipefail
OUT=${OUT:-gpu-check-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
if [ -d "$WHEELS" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD/src
else
    export PYTHONPATH=$PWD/src
fi
export PYTHONUNBUFFERED=1
$PY -c "import torch, dynascope; print('torch', torch.__version__, '|', torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA')" || exit 1
parts=${*:-tests bench validate}
status=0
for part in $parts; do
    case $part in
    tests) timeout 240 $PY -m pytest -m gpu -q tests 2>&1 | tee "$OUT/gpu-tests.log" ;;
    bench) timeout 300 $PY benchmarks/bench_gpu.py --quick --out "$OUT/bench_gpu.json" 2>&1 | tee "$OUT/bench_gpu.log" ;;
    validate) timeout 420 $PY benchmarks/validate_gpu.py --steps 5 --out "$OUT/validate_gpu.json" 2>&1 | tee "$OUT/validate_gpu.log" ;;
    *) echo "gpu_check: unknown part '$part' (tests, bench, validate)"; exit 2 ;;
    esac || status=1
done
exit $status
