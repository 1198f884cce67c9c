#!/usr/bin/env bash
# bf16 FSDP2 with gradient checkpointing on the device's torch, on one H200 (run from the
# repository root; <= 3 minutes):
#   OUT=$OUT SUITE_GIT_SHA=<sha> bash lab/device/fsdp_checkpointing.sh
# 1. tests/test_train_gpu.py: diffusers' Wan transformer on CUDA (step timing, emulation,
#    checkpointing in bf16, fused AdaLN, FSDP2 vs DDP on one NCCL rank, and bf16 FSDP2 with and
#    without gradient checkpointing, the test that failed in reports/reference/h200/train31-4831b5d);
# 2. tests/test_train_checkpointing.py on this machine's torch (2.11) and its CPU: bf16 DDP and
#    FSDP2 with and without checkpointing on two gloo ranks, FSDP2's recompute as this torch does
#    it (the test's torch < 2.13 emulation has nothing to patch here).
# Writes $OUT/{gpu.txt, pytest_gpu.log, pytest_ckpt.log, table.txt}; prints one line per test last.
set -o pipefail
source tools/device/common.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
gpu_env | tee "$OUT/gpu.txt"
# the mechanism on this torch: does FSDP2's pre-forward cast inputs when it fires in a recompute?
python3 - <<'PY' 2>&1 | tee -a "$OUT/gpu.txt"
import inspect

from torch.distributed.fsdp._fully_shard._fsdp_state import FSDPState

src = inspect.getsource(FSDPState._pre_forward).splitlines()
at = next(k for k, line in enumerate(src) if "PRE_BACKWARD" in line)
print("FSDPState._pre_forward, its recompute branch:")
print("\n".join(src[at : at + 9]))
PY

stamp "GPU tests (tests/test_train_gpu.py)"
timeout 140 python3 -m pytest -rA -p no:cacheprovider -m gpu tests/test_train_gpu.py \
  > "$OUT/pytest_gpu.log" 2>&1
echo "rc=$?"; tail -3 "$OUT/pytest_gpu.log"

stamp "bf16 checkpointing on two gloo ranks (tests/test_train_checkpointing.py)"
timeout 75 python3 -m pytest -rA -p no:cacheprovider tests/test_train_checkpointing.py \
  > "$OUT/pytest_ckpt.log" 2>&1
echo "rc=$?"; tail -3 "$OUT/pytest_ckpt.log"

stamp "per-test results"
grep -hE "^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) " "$OUT/pytest_gpu.log" "$OUT/pytest_ckpt.log" \
  | tee "$OUT/table.txt"
grep -hE "^=+ .* in [0-9.]+s" "$OUT/pytest_gpu.log" "$OUT/pytest_ckpt.log" | tee -a "$OUT/table.txt"
