"""The bf16 matrix-product rate (TFLOP/s) cuBLAS reaches on the GPU for the benchmark model's shapes (the
MLP's up/gate and down projections, the attention's fused qkv and output) at capture's batch sizes: the
sustained rate that bounds capture, beside the 790 TFLOP/s peak the protocol quotes. --library cublaslt asks
torch to prefer cuBLASLt. Usage: python3 gemm_probe.py [--library cublas|cublaslt]
"""
import argparse, time
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--library", default="cublas", choices=["cublas", "cublaslt"])
library = parser.parse_args().library
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cuda.preferred_blas_library(library)
for n_out, k in ((20480, 2560), (2560, 10240), (4096, 2560), (2560, 2048)):
    w = torch.randn(n_out, k, device="cuda", dtype=torch.bfloat16)
    for m in (20992, 21000, 21504, 23552):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        for _ in range(3): torch.nn.functional.linear(x, w)
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(20): torch.nn.functional.linear(x, w)
        torch.cuda.synchronize(); dt = (time.perf_counter() - t) / 20
        print(f"{library} out {n_out} k {k} m {m}: {2*m*n_out*k/dt/1e12:.0f} TFLOP/s")
