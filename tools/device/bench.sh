#!/usr/bin/env bash
# GPU regression benchmarks on a GPU node: pytest-benchmark kernels (JSON) and the asv GPU suite
# saved under the GPU's machine name (h100, h200; MACHINE=<name> overrides) for the commit whose
# .git travels with the tree.
#   usage (device tool; carry .whl and .gitbundle, since .git itself cannot travel): bash tools/device/bench.sh
#   .gitbundle holds shallow.tgz, the .git of a depth-1 clone (same SHA and date), partial and
#   sparse (~3.5 MB; a full one, 23 MB, no longer fits beside the tree and .whl): make it with
#     bash tools/device/make_gitbundle.sh
#   or repo.bundle (`git bundle create .gitbundle/repo.bundle main`: the whole history, which
#   outgrew the 64 MiB a call carries at 68 MB)
set -uo pipefail
# the wheelhouse (asv, asv_runner, ...) lands in /tmp/site, on PYTHONPATH; benchmarks.run_asv passes
# that on to asv's benchmark processes (asv itself drops PYTHONPATH)
. tools/device/common.sh
out=$OUT
export NCCL_NVLS_ENABLE=0
# asv keeps one history per machine: an H100 point must not land in the H200's series
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
machine=${MACHINE:-$(echo "$gpu" | grep -oiE 'h100|h200|a100|b200' | head -1 | tr A-Z a-z)}
machine=${machine:-gpu}
exec > >(tee "$out/bench.log") 2>&1
[ -n "${SKIP_PYTEST:-}" ] || timeout 120 python3 -m pytest -q tests/bench/test_bench_kernels.py --benchmark-enable \
  --benchmark-timer suite.timing.cuda_synced_perf_counter --benchmark-json "$out/bench_kernels.json" \
  --benchmark-columns median,iqr,rounds -p no:cacheprovider
# asv labels results with a commit of a real checkout: clone the bundle (same history, same SHA)
# (the node's copy of the tree may carry a stale .git: the bundle, when there, is the truth)
if [ -f .gitbundle/shallow.tgz ]; then
  rm -rf /tmp/repo; mkdir -p /tmp/repo && tar xzf .gitbundle/shallow.tgz -C /tmp/repo \
    && cd /tmp/repo && git checkout -q -f
elif [ -f .gitbundle/repo.bundle ]; then
  rm -rf /tmp/repo; git clone -q -b main .gitbundle/repo.bundle /tmp/repo && cd /tmp/repo
fi
# the clone's code on the path, not the carried tree's: the image's python may not put the working
# directory first (benchmarks.run_asv read the carried tree's stale .git and labelled a point wrong)
export PYTHONPATH=$PWD:/tmp/site
git log -1 --format='asv at %H'
# 400 s: one commit's point of bench_kernels took ~190 s, and a 200 s limit once cut another with
# nothing written
echo "asv machine: $machine ($gpu)"
timeout 400 python3 -m benchmarks.run_asv --machine "$machine" --bench "^bench_kernels\."
tar czf "$out/asv_results.tgz" .asv/results
