#!/usr/bin/env bash
# The README's test command on a GPU node, as a user there runs it (one device call, < 10 min):
# install from the wheelhouse (.whl/: the suite's wheel, nox, and the test extras the image
# lacks), then the offline nox session over the whole of tests/, CPU and GPU files alike.
# GPU kernel tests run the default kernel only (ADAPTIVELOAD_TEST_VARIANTS; every variant is
# lab/device/kernel_variants.sh's job). Writes $OUT/log and $OUT/junit.xml.
#   usage (device tool, carry .whl): OUT=$OUT SUITE_GIT_SHA=<sha> [LIMIT=540] bash tools/device/tests.sh [pytest args]
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 ADAPTIVELOAD_TEST_VARIANTS=${ADAPTIVELOAD_TEST_VARIANTS:-default}
exec > >(tee "$out/log") 2>&1

echo "== install from the wheelhouse (no network)"
python3 -m pip install -q --no-index --find-links .whl 'adaptiveload-suite[reproduce,bench]' nox hypothesis pytest-timeout \
  || echo "wheelhouse install failed: tests needing what is missing will fail or skip"
python3 -m pip show adaptiveload-suite nox hypothesis pyarrow pandas numpy 2>/dev/null | grep -E "^(Name|Version)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,ecc.mode.current --format=csv
echo "commit ${SUITE_GIT_SHA:-unknown}"

echo "== nox -s tests (limit ${LIMIT:-540} s)"
start=$(date +%s)
timeout "${LIMIT:-540}" python3 -m nox --no-venv --no-install -s tests -- \
  -q -rfEs -p no:cacheprovider --durations=25 --junitxml "$out/junit.xml" "$@"
echo "tests exit $? after $(( $(date +%s) - start )) s"
