#!/usr/bin/env bash
# The reference run on one GPU node with no network, the way the README tells a user to do it:
# install from a wheelhouse (.whl/: the suite's wheel + what the node lacks), then the offline nox
# session. Writes $OUT/run.tgz (the whole run directory) and $OUT/log.
#   usage (device tool): SUITE_GIT_SHA=<sha> [NPROC=2] bash tools/device/reproduce.sh [quick|full] [seconds]
# (NPROC > 1: torchrun with that many ranks, one per GPU: the training claims get real NCCL ranks)
# A run longer than one call (the full profile: ~42 min) resumes across calls: put the previous
# call's run.tgz at runs/<profile>.tgz (git-ignored) or name it RESUME=<path>, carry that path,
# and the run continues where it stopped (finished experiments and training runs are kept).
# Across checkouts (a new one has no runs/), commit the partial run.tgz and pass RESUME; all
# invocations of one reference must run the same commit. Without a tgz every call starts from an
# empty run directory (a warm machine's earlier /tmp/run-<profile> is removed), except with KEEP=1:
# a warm machine's /tmp/run-<profile> of the same SUITE_GIT_SHA is newer than any tgz and is kept
# (so the next call need not wait for the last one's tgz to be carried back).
set -uo pipefail
profile=${1:-quick}
limit=${2:-575}  # one 600 s device call: the install before and the tar after take ~15 s
out=${OUT:-/tmp/out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
exec > >(tee "$out/log") 2>&1

echo "== install from the wheelhouse (no network)"
if ! python3 -m pip install -q --no-index --find-links .whl 'adaptiveload-suite[reproduce,bench]' nox; then
  echo "wheelhouse install failed; falling back to --target /tmp/site"
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
python3 -m pip show adaptiveload-suite nox asv 2>/dev/null | grep -E "^(Name|Version)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,ecc.mode.current --format=csv

echo "== reproduce --profile $profile (limit ${limit}s)"
run=/tmp/run-$profile
resume=${RESUME:-runs/$profile.tgz}
if [ "${KEEP:-0}" = 1 ] && [ -d "$run/results" ] && [ "$(cat "$run/.sha" 2>/dev/null)" = "${SUITE_GIT_SHA:-}" ]; then
  echo "keeping this warm machine's $run (commit ${SUITE_GIT_SHA:-})"
else
  rm -rf "$run"
  if [ -f "$resume" ]; then
    tar xzf "$resume" -C /tmp
  elif ls "$resume".part* >/dev/null 2>&1; then  # a run.tgz that came back in parts
    cat "$resume".part* | tar xz -C /tmp
  fi
fi
mkdir -p "$run" && echo "${SUITE_GIT_SHA:-}" > "$run/.sha"
[ -d "$run/results" ] && echo "resuming $run from $resume: $(ls "$run"/results | grep -c done.json) experiments done"
start=$(date +%s)
timeout "$limit" python3 -m nox --no-venv --no-install -s reproduce -- --profile "$profile" --out "$run" \
  ${BUDGET:+--budget "$BUDGET"} ${NPROC:+--nproc-per-node "$NPROC"}
echo "reproduce exit $? after $(( $(date +%s) - start )) s"
tar czf "$out/run.tgz" -C /tmp "run-$profile"
# the device returns files of at most 16 MiB each: a larger run.tgz comes back in 15 MiB parts
# (run.tgz.part00, ...), which RESUME=<dir>/run.tgz reassembles
if [ "$(stat -c %s "$out/run.tgz")" -gt $((15 * 1024 * 1024)) ]; then
  split -b 15M -d "$out/run.tgz" "$out/run.tgz.part" && rm "$out/run.tgz"
fi
ls -la "$out"
