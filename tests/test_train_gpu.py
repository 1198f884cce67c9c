"""The trainer on a CUDA GPU (skipped with a reason without one)."""

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none)"),
]


def test_stepfn_on_gpu_measures_time_and_memory():
    from suite.train.stepfn import make_step_fn

    step = make_step_fn("wan-1.3b", layers=1, device="cuda", text_len=64)
    step(1, 1560)
    sec, peak = step(2, 1560)
    assert 0 < sec < 10 and peak > 0


def test_emulated_run_on_gpu(tmp_path):
    from suite.train.__main__ import main
    from suite.train.logs import read_logs

    main(
        [
            "--model",
            "tiny",
            "--mix",
            "tiny",
            "--steps",
            "2",
            "--emulate-ranks",
            "4",
            "--out",
            str(tmp_path),
            "--corpus-size",
            "400",
        ]
    )
    r = read_logs(tmp_path)
    assert len(r) == 8 and (r.peak_mem_bytes > 0).all() and (r.compute_s > 0).all()


def test_bf16_wan_and_eager_agree_on_gpu():
    from suite.model import WanDiT, get_config

    torch.manual_seed(0)
    m = WanDiT(get_config("wan-1.3b", layers=1, text_len=16)).cuda()
    x = torch.randn(1, 16, 1, 60, 104, device="cuda")
    ctx = torch.randn(1, 16, 4096, device="cuda")
    t = torch.tensor([500.0], device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16), torch.no_grad():
        a = m(x, t, ctx).float()
        m.set_adaln("eager")
        b = m(x, t, ctx).float()
    assert ((a - b).abs().mean() / a.abs().mean()).item() < 0.05


def test_fused_adaln_trains_if_available():
    from suite.model import WanDiT, flow_matching_loss, get_config

    try:
        from suite.model.dit import _fused_adaln

        _fused_adaln()
    except RuntimeError as e:
        pytest.skip(f"fused AdaLN op not available: {e}")
    torch.manual_seed(0)
    m = WanDiT(get_config("wan-1.3b", layers=1, text_len=16), adaln="fused").cuda()
    x = torch.randn(2, 16, 1, 60, 104, device="cuda")
    ctx = torch.randn(2, 16, 4096, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = flow_matching_loss(m, x, ctx)
    loss.backward()
    assert torch.isfinite(loss)


def test_fsdp_and_ddp_on_one_nccl_rank_train_alike(tmp_path):
    """`--fsdp` under torchrun on NCCL: the mesh is the GPU's, and the losses are DDP's."""
    import numpy as np
    from launch_ranks import torchrun

    from suite.train.logs import read_logs, step_table

    def run(out, *extra):
        args = ["-m", "suite.train", "--model", "tiny", "--mix", "tiny", "--steps", "3",
                "--corpus-size", "400", "--dtype", "fp32", "--device", "cuda", "--policy", "dual",
                "--out", str(out), *extra]  # fmt: skip
        torchrun(args, 1, 29700, timeout=180)
        return step_table(read_logs(out))

    ddp, fsdp = run(tmp_path / "ddp"), run(tmp_path / "fsdp", "--fsdp")
    assert len(fsdp) == len(ddp) == 3
    np.testing.assert_allclose(fsdp.loss, ddp.loss, rtol=1e-4)
