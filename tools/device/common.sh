# Sourced by tools/device/*.sh and lab/device/*.sh: the shared set-up of one device call.
# Afterwards $OUT exists, the staged wheels (.whl/: nox, asv, diffusers, ...) are importable from /tmp/site behind this
# tree (a staged suite wheel never shadows the code under test), and these are defined:
#   stamp MSG                  a heading with the seconds since the call began
#   gpu_env                    GPU, driver, clocks, ECC; torch, CUDA, cuda-bindings, NVRTC; commit
#   gpu_prebuild MODULE FN     NVRTC-compile every configuration MODULE.FN() lists, in parallel
OUT=${OUT:-./gpu_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || echo "wheel install failed"
  rm -rf /tmp/site/suite
fi
export PYTHONPATH=$PWD:/tmp/site

gpu_env() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,ecc.mode.current,uuid --format=csv
  python3 -c "import torch, cuda.bindings as cb; from cuda.bindings import nvrtc; \
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cuda-bindings', cb.__version__, \
'nvrtc', nvrtc.nvrtcVersion()[1:])"
  echo "commit ${SUITE_GIT_SHA:-unknown (pass SUITE_GIT_SHA: the device copy has no trustworthy git history)}"
}

gpu_prebuild() {
  timeout 150 python3 -c "
import importlib, os, time; t = time.time()
from suite.cuda.launch import device_arch
m = importlib.import_module('$1')
n = m.prebuild(m.$2(), device_arch(0), workers=max(1, (os.cpu_count() or 2) - 1))
print(n, 'programs for', device_arch(0), f'in {time.time() - t:.1f} s')"
}
