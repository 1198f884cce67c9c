"""Lead's diagnostic (issue 32): where the fused op's fwd+bwd host time goes on the GPU node,
and why CUDA-graph capture of fwd+bwd fails. Prints a profiler table and the capture error."""
import sys, time, traceback
import torch
from suite.ops import adaln

dev = "cuda"
B, N, D = 8, 1560, 1536
x = torch.randn(B, N, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
e = torch.randn(B, 6, D, device=dev, dtype=torch.float32, requires_grad=True)
dy = torch.randn(B, N, D, device=dev, dtype=torch.bfloat16)

def fb():
    return torch.autograd.grad(adaln(x, e[:, 1:2], e[:, 0:1]), (x, e), dy)

for _ in range(20):
    fb()
torch.cuda.synchronize()
# host time per call, plain
t = time.perf_counter()
for _ in range(200):
    fb()
torch.cuda.synchronize()
print(f"fwd+bwd burst {1e6*(time.perf_counter()-t)/200:.1f} us/call")

from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(50):
        fb()
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))
prof.export_chrome_trace(sys.argv[1] + "/fb_trace.json")

# graph capture, with the exact error
for name, fn in (("fwd", lambda: adaln(x.detach(), e[:, 1:2].detach(), e[:, 0:1].detach())), ("fwd+bwd", fb)):
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = fn()
        g.replay(); torch.cuda.synchronize()
        print(name, "capture OK")
    except Exception:
        print(name, "capture FAILED:")
        traceback.print_exc()
        torch.cuda.synchronize()
        break
