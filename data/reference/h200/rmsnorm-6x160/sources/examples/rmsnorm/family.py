"""RMSNorm as a headroom family: one `@triton.autotune` kernel whose configs are the candidates, one
call per engine step over the step's new tokens (a decoder layer's input norm).

The question it answers: does choosing the config per token count pay over the one global config,
net of the switch, in eager and graph modes? Copy this folder, change the kernel, the shapes and the
reference, and run `headroom family check examples.rmsnorm.family:SMOKE` (docs/families.md).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from headroom.families import Feature, from_triton_autotune

EPS = 1e-6
#: Token counts a server captures CUDA graphs for (vLLM's default sizes up to 512): a step's token
#: count is padded to the next one under graph replay; a step with more tokens runs eager.
CAPTURE_SIZES = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 128}, num_warps=1),
        triton.Config({"BLOCK": 256}, num_warps=2),
        triton.Config({"BLOCK": 1024}, num_warps=4),
        triton.Config({"BLOCK": 4096}, num_warps=8),
    ],
    key=["n_cols"],
)
@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, n_cols, stride, eps, BLOCK: tl.constexpr):
    """One program per row: the sum of squares in BLOCK-wide chunks, then the scaled row."""
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * stride + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def make(hidden: int, dtype: str):
    """The family for one layer width and dtype."""

    def shapes(step):
        return [{"tokens": step.tokens, "hidden": hidden, "dtype": dtype}]

    def inputs(shape, *, seed, device):
        g = torch.Generator().manual_seed(seed)
        dt = getattr(torch, shape["dtype"])
        x = torch.randn(shape["tokens"], shape["hidden"], generator=g).to(device=device, dtype=dt)
        w = (1.0 + 0.1 * torch.randn(shape["hidden"], generator=g)).to(device=device, dtype=dt)
        return {"x": x, "w": w, "out": torch.full_like(x, float("nan"))}

    def args(shape, inp):
        x = inp["x"]
        return (x.shape[0],), (x, inp["w"], inp["out"], x.shape[1], x.stride(0), EPS), {}

    def reference(shape, inp):
        x, w = inp["x"].double(), inp["w"].double()
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS) * w

    def tolerance(dt):
        return {"float32": (1e-5, 1e-4), "float16": (2e-3, 1e-2), "bfloat16": (1e-2, 6e-2)}[dt]

    def cost(shape):
        size = {"float32": 4, "float16": 2, "bfloat16": 2}[shape["dtype"]]
        n = shape["tokens"] * shape["hidden"]
        return {"flops": 4.0 * n, "bytes": float((2 * n + shape["hidden"]) * size)}

    return from_triton_autotune(
        rmsnorm_kernel,
        name="rmsnorm",
        version="1",
        features={
            "tokens": Feature("int", capture_fixed=True, pad_to=CAPTURE_SIZES, min=1),
            "hidden": Feature("int", capture_fixed=True, min=1),
            "dtype": Feature("category", capture_fixed=True),
        },
        shapes=shapes,
        inputs=inputs,
        args=args,
        reference=reference,
        tolerance=tolerance,
        cost=cost,
    )


#: A Llama-8B-like layer (hidden 4096) in bfloat16, for the GPU.
FAMILY = make(4096, "bfloat16")
#: A narrow layer in float16 for the CPU interpreter (its bfloat16 is slow and its tl.dot wrong).
SMOKE = make(512, "float16")
