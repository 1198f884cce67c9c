"""pytest-benchmark set-up: GPU and driver in the saved JSON's machine_info.

`nox -s bench` keeps each GPU model's runs apart (.benchmarks/<gpu model>/, so --compare never
compares an H100 with an H200) and passes `--benchmark-timer
suite.timing.cuda_synced_perf_counter`, which waits for queued CUDA work before reading the
clock (the default timer measures only the launch).
"""

from __future__ import annotations

import subprocess


def _gpu_info() -> dict:
    info: dict = {}
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda_available"] = torch.cuda.is_available()
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            info.update(
                gpu=p.name,
                gpu_count=torch.cuda.device_count(),
                cuda=torch.version.cuda,
                sm=f"{p.major}.{p.minor}",
                gpu_mem_gib=round(p.total_memory / 2**30, 1),
            )
    except Exception as e:  # never fail a benchmark run over machine info
        info["torch_error"] = repr(e)
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=driver_version,clocks.max.sm,power.limit",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if out.returncode == 0:
            info["nvidia_smi"] = out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


def pytest_benchmark_update_machine_info(config, machine_info):
    machine_info["gpu"] = _gpu_info()
