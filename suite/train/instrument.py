"""Per-step timing and memory instrumentation, and the per-rank JSONL log schema.

Timing: CUDA events on the current stream around each phase (read after one synchronize at the
end of the step), or time.perf_counter on CPU, where every phase is synchronous. Peak memory: the
CUDA allocator's max allocated (and max reserved) bytes since a reset at the start of each step.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

# one JSON object per line, per step and rank (also the emulator's per-virtual-rank rows)
LOG_FIELDS = (
    "step",
    "rank",
    "world",
    "policy",
    "adaln",
    "model",
    "layers",
    "dim",
    "emulated",
    "B",
    "S",
    "tokens",
    "samples",
    "bucket",
    "micro_batches",
    "global_tokens",
    "loss",
    "data_s",
    "compute_s",
    "collective_wait_s",
    "optimizer_s",
    "step_s",
    "peak_mem_bytes",
    "peak_reserved_bytes",
)


class PhaseTimer:
    """marks = ["start", "compute", ...]; seconds(a, b) between two marks after finish()."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: dict[str, object] = {}

    def mark(self, name: str) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.marks[name] = ev
        else:
            self.marks[name] = time.perf_counter()

    def finish(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def seconds(self, a: str, b: str) -> float:
        if self.cuda:
            return self.marks[a].elapsed_time(self.marks[b]) / 1e3
        return float(self.marks[b] - self.marks[a])


def optimizer_step(opt, timer: PhaseTimer) -> None:
    """Step and clear the gradients, then close the timer's last phase ("optimizer")."""
    opt.step()
    opt.zero_grad(set_to_none=True)
    timer.mark("optimizer")
    timer.finish()


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_bytes(device: torch.device) -> tuple[int, int]:
    """(max allocated, max reserved) since the last reset; (0, 0) on CPU (not measured)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device)), int(
            torch.cuda.max_memory_reserved(device)
        )
    return 0, 0


class JsonlLog:
    """Append-only JSONL writer (one flushed line per record)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = self.path.open("w", encoding="utf-8")

    def write(self, record: dict) -> None:
        self._f.write(json.dumps(record, sort_keys=True) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()
