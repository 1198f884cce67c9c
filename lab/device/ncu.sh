#!/usr/bin/env bash
# Nsight Compute on the fused AdaLN kernels (one H200; the Firecracker runtime reads the hardware
# counters, KINDS.md): every launch of lab/adaln_ncu_target.py (per variant and width: forward,
# backward, finalize), the full section set, clocks left alone (METHOD.md). Writes
# $OUT/adaln.ncu-rep.tgz, $OUT/details.txt (every section, every kernel), $OUT/raw.csv (every
# metric) and prints the speed-of-light and warp-stall lines last.
#   usage (device tool): OUT=$OUT [VARIANTS=default,round1] [WIDTHS=1536,3072,5120] [NCU_N=65536] \
#     [NCU_X=float32] [NCU_Y=float32] [NCU_COPY=1] bash lab/device/ncu.sh  (NCU_X: x's dtype, bf16;
#     NCU_Y: y's dtype, default x's;
#     NCU_COPY=1: also y = x * 1 per width, a torch elementwise kernel moving the forward's bytes;
#     the backward's slice glue, also torch elementwise kernels, is then profiled too;
#     NCU_STREAM=1: also lab/mixed_copy.py's bf16 -> fp32 stream kernels per width;
#     NCU_CACHE=none: caches not flushed before each profiled kernel (ncu flushes by default, so a
#     kernel reading what the previous one left in L2, as the backward's finalize does, is
#     profiled as if from DRAM); NCU_KERNELS: a regex of kernel names instead of every adaln one)
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT=${OUT:-./gpu_out}; mkdir -p "$OUT"
VARIANTS=${VARIANTS:-default,round1}
WIDTHS=${WIDTHS:-1536,3072,5120}
NCU_N=${NCU_N:-65536}  # tokens per row block (B = 1)
nv=$(echo "$VARIANTS" | tr ',' '\n' | grep -c .); nw=$(echo "$WIDTHS" | tr ',' '\n' | grep -c .)
which ncu || { echo "ncu not on the PATH"; exit 2; }
# randn's kernels (distribution_elementwise_grid_stride_kernel) are left out by name
KERNELS=regex:${NCU_KERNELS:-adaln}${NCU_COPY:+|elementwise_kernel}${NCU_STREAM:+|stream_convert}
timeout 420 ncu --clock-control none --cache-control "${NCU_CACHE:-all}" --kernel-name "$KERNELS" \
  --set full -f -o "$OUT/adaln" \
  python3 lab/adaln_ncu_target.py --variants "$VARIANTS" --widths "$WIDTHS" --n "$NCU_N" \
  ${NCU_X:+--dtype "$NCU_X"} ${NCU_Y:+--out-dtype "$NCU_Y"} ${NCU_COPY:+--copy} ${NCU_STREAM:+--stream} > "$OUT/ncu.log" 2>&1
echo "ncu exit=$? ($nv variants x $nw widths x 3 kernels expected)"
tail -5 "$OUT/ncu.log"
ncu --import "$OUT/adaln.ncu-rep" --page details > "$OUT/details.txt" 2>&1
ncu --import "$OUT/adaln.ncu-rep" --page raw --csv > "$OUT/raw.csv" 2>&1
tar czf "$OUT/adaln.ncu-rep.tgz" -C "$OUT" adaln.ncu-rep && rm -f "$OUT/adaln.ncu-rep"
grep -E "^  adaln|^  void |Memory Throughput|DRAM Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Issue Slots Busy|Stall" "$OUT/details.txt" | head -200
