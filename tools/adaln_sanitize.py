"""A small representative set of fused AdaLN calls for compute-sanitizer (memcheck, racecheck,
initcheck): every kernel (forward, fused and D-tile backward, finalize), vector and scalar paths,
row groups below and above a warp, per-sample / per-token / affine, B > 1, odd N."""

import torch

from suite.ops import adaln, layer_norm_affine


def main() -> None:
    torch.manual_seed(0)
    cases = [
        (2, 37, 1536, torch.bfloat16),
        (1, 5, 64, torch.float32),
        (2, 9, 1000, torch.float16),
        (1, 17, 4100, torch.bfloat16),
        (1, 3, 8192, torch.float32),
    ]
    for B, N, D, dt in cases:
        x = torch.randn(B, N, D, device="cuda").to(dt).requires_grad_(True)
        e = torch.randn(B, 6, D, device="cuda", requires_grad=True)
        for bwd in ("fused", "dtile"):
            for out in (None, torch.float32):
                y = adaln(x, e[:, 1:2], e[:, 0:1], out_dtype=out, backward=bwd)
                torch.autograd.grad(y, (x, e), torch.randn_like(y))
        t = torch.randn(B, N, D, device="cuda").to(dt).requires_grad_(True)
        y = adaln(x, t, t * 0.5)
        torch.autograd.grad(y, (x, t), torch.randn_like(y))
        w = torch.randn(D, device="cuda", requires_grad=True)
        y = layer_norm_affine(x, w, w * 0.1)
        torch.autograd.grad(y, (x, w), torch.randn_like(y))
        xm = torch.randn(B * N * D + 1, device="cuda").to(dt)[1:].view(B, N, D)  # misaligned
        adaln(xm, e[:, 1:2], e[:, 0:1])
    torch.cuda.synchronize()
    print("sanitize cases done")


if __name__ == "__main__":
    main()
