"""A family written only against docs/families.md, outside the package: a row softmax over each
step's new tokens, its candidates plain torch functions (one of them wrong when asked)."""

from __future__ import annotations

import torch

from headroom.families import Candidate, Feature


class RowSoftmax:
    name = "row-softmax"
    version = "1"
    features = {
        "tokens": Feature("int", capture_fixed=True, pad_to=[1, 2, 4, 8, 16, 32, 64], min=1),
        "width": Feature("int", capture_fixed=True, min=1),
        "dtype": Feature("category", capture_fixed=True),
    }

    def __init__(self, width: int = 64, wrong: bool = False, only_small: bool = False):
        self.width, self.wrong, self.only_small = width, wrong, only_small

    def shapes(self, step):
        return [{"tokens": step.tokens, "width": self.width, "dtype": "float32"}]

    def candidates(self):
        found = [Candidate("torch", {"stable": True}), Candidate("exp-sum", {"stable": False})]
        return found + ([Candidate("off-by-one", {})] if self.wrong else [])

    def supports(self, candidate, shape):
        return not (self.only_small and candidate.id == "exp-sum" and shape["tokens"] > 8)

    def inputs(self, shape, *, seed, device):
        g = torch.Generator().manual_seed(seed)
        return torch.randn(shape["tokens"], shape["width"], generator=g).to(device)

    def prepare(self, candidate, shape, inputs):
        if candidate.id == "torch":
            return lambda x: torch.softmax(x, dim=-1)
        if candidate.id == "exp-sum":
            return lambda x: x.exp() / x.exp().sum(dim=-1, keepdim=True)
        return lambda x: torch.softmax(x + torch.arange(x.shape[-1], device=x.device) * 1e-2, dim=-1)

    def reference(self, shape, inputs):
        return torch.softmax(inputs.double(), dim=-1)

    def tolerance(self, dtype):
        return {"float32": (1e-5, 1e-6)}[dtype]

    def cost(self, shape):
        n = shape["tokens"] * shape["width"]
        return {"flops": 5.0 * n, "bytes": 8.0 * n}


FAMILY = RowSoftmax()
WRONG = RowSoftmax(wrong=True)
PARTIAL = RowSoftmax(only_small=True)
