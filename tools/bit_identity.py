"""Bit identity of the kernels across a code move: output and compiled-IR hashes per candidate.

    python3 tools/bit_identity.py write OUT.json [--root DIR] [--device cpu|cuda] [--jobs N]
    python3 tools/bit_identity.py --compare A.json B.json

`write` imports `kernels` from DIR (a folder holding kernels/; the repository by default) and,
for every candidate of both generations (config/config.yaml's tiles x each generation's RoPE
placements, headroom/families/attention/candidates.py) on fixed shapes and seeds -- prefill, a chunk over a
cache (q_len < kv_len) and split-KV decode, generation 2's decode with both merges (reduction
launch: DEFAULT_VARIANT; in the decode kernel) -- and every tile of generation 3 (the varlen
decode, kernels.plan_decode_varlen) on a ragged batch (KV_LENS), and the decodes once more on a
cache too short to split (SPLIT=False), records:
  out:      BLAKE3 of the output's bytes, run as the studies run it (generation 1:
            attention(fused=...), generation 2: plan(...).run);
  launches: each launch's kernel name and grid;
  ir:       per launch, BLAKE3 of the compiled TTGIR and PTX for sm_90 with location and debug
            lines stripped (file paths change when files move), the TTGIR parsed and printed
            back by MLIR (renumber_ttgir: Triton 3.9 names SSA values after the source's
            variables, %acc, %stride_qb, so a renamed variable or a parameter tuple renames
            them; the round trip numbers them, and two TTGIRs hash alike when they are the
            same module up to those names). The PTX holds no source names but the kernel's:
            it is hashed as compiled, less LLVM's $L__tmp debug-scope labels.
--device cuda (the default when a GPU is present): everything compiled and launched on the GPU,
bfloat16, IR from the kernels' own compile (warmup). --device cpu: outputs under the Triton
interpreter in float16 on small shapes (SHAPES['cpu']), and IR of the GPU shapes and dtype
compiled for GPUTarget('cuda', 90, 32) without a GPU, through Triton's own argument
specialisation and the H200's SM count (the IR the H200 compiles for these arguments).
Each root compiles into its own fresh Triton cache. --compare exits 1 naming every difference.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SEED = 20261201
SM90_SMS = 132  # the H200's SM count: the decode split plan the IR is compiled for on CPU
# (B, Hq, Hkv, Sq, Skv, D, rotate_k) per shape; decode over a rotated cache, splits > 1 in both;
# decode1 / varlen1: keys too few to split (kernels/split.py: fewer than 2 * MIN_SPLIT_KEYS, the
# interpreter's 2 * 16), the kernels' SPLIT=False specialisation; varlen / varlen1: generation 3
_SHAPE_TABLE = (  # shape, on cuda, on cpu
    ("prefill", (1, 4, 2, 192, 192, 128, True), (1, 4, 2, 40, 40, 64, True)),
    ("chunk", (1, 4, 2, 64, 320, 128, True), (1, 4, 2, 16, 72, 64, True)),
    ("decode", (2, 4, 2, 1, 1024, 128, False), (1, 4, 2, 1, 64, 64, False)),
    ("decode1", (2, 4, 2, 1, 256, 128, False), (1, 4, 2, 1, 16, 64, False)),
    ("varlen", (2, 4, 2, 1, 1024, 128, False), (2, 4, 2, 1, 64, 64, False)),
    ("varlen1", (2, 4, 2, 1, 256, 128, False), (2, 4, 2, 1, 16, 64, False)),
)
SHAPES = {device: {row[0]: row[1 + d] for row in _SHAPE_TABLE} for d, device in enumerate(("cuda", "cpu"))}
# generation 3: the valid keys of each sequence of a varlen shape (a ragged batch)
KV_LENS = {
    "cuda": {"varlen": (1024, 517), "varlen1": (256, 131)},
    "cpu": {"varlen": (64, 37), "varlen1": (16, 9)},
}
DTYPE = {"cuda": "bfloat16", "cpu": "float16"}


def cases() -> list[dict]:
    """Every candidate of both generations on every shape; generation 2's decode twice."""
    import yaml

    sys.path.insert(0, str(REPO))
    from headroom.families.attention.candidates import GENERATION_1_PLACEMENTS, ROPE_PLACEMENTS

    tiles = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["tiles"]
    out = []
    for generation, placements in ((1, GENERATION_1_PLACEMENTS), (2, ROPE_PLACEMENTS)):
        for rope in placements:
            for i, tile in enumerate(tiles):
                for shape in ("prefill", "chunk", "decode", "decode1"):
                    merges = (
                        ("default", "in_kernel") if generation == 2 and shape == "decode" else ("default",)
                    )
                    for merge in merges:
                        key = f"g{generation}/{rope}/t{i}/{shape}/{merge}"
                        out.append(
                            dict(
                                key=key, generation=generation, rope=rope, tile=tile, shape=shape, merge=merge
                            )
                        )
    for i, tile in enumerate(tiles):
        for shape in ("varlen", "varlen1"):
            key = f"g3/varlen/t{i}/{shape}/default"
            out.append(dict(key=key, generation=3, rope="varlen", tile=tile, shape=shape, merge="default"))
    return out


def _worker_init(root: str, device: str, interpret: bool, cache: str) -> None:
    """A fresh process importing kernels from root in the wanted Triton mode."""
    os.environ.pop("TRITON_INTERPRET", None)
    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    os.environ["TRITON_CACHE_DIR"] = cache
    sys.path.insert(0, root)
    import kernels

    if device == "cpu" and not interpret:
        _compile_only_on_cpu(kernels)


def _module(kernels, *names):
    """The first of kernels.<name> that exists (the recorded tree and this one name rooms apart)."""
    import importlib

    for name in names:
        try:
            return importlib.import_module(f"kernels.{name}")
        except ModuleNotFoundError:
            continue
    raise ModuleNotFoundError(f"none of kernels.{names} in {kernels.__file__}")


def _compile_only_on_cpu(kernels) -> None:
    """Compiled-mode kernels on a machine without a GPU: CPU tensors pass the device check, the
    SM count is the H200's, and plans keep their specs instead of compiling them on a driver."""
    mode = _module(kernels, "mode", "_mode")
    mode.expected_device_type = lambda: "cpu"
    mode.sm_count = lambda device: SM90_SMS

    class SpecOnly:
        def __init__(self, spec, example, device):
            self.spec, self.direct = spec, False

    _module(kernels, "plans").CompiledLaunch = SpecOnly
    _module(kernels, "decode_varlen").CompiledLaunch = SpecOnly


def _inputs(shape: tuple, dtype: str, device: str):
    import torch

    import kernels

    batch, heads_q, heads_kv, q_len, kv_len, head_dim, _ = shape
    gen = torch.Generator().manual_seed(SEED)
    q, k, v = (
        torch.randn(dims, generator=gen).to(getattr(torch, dtype)).to(device)
        for dims in (
            (batch, heads_q, q_len, head_dim),
            (batch, heads_kv, kv_len, head_dim),
            (batch, heads_kv, kv_len, head_dim),
        )
    )  # q (B, Hq, Sq, D); k, v (B, Hkv, Skv, D)
    cos, sin = kernels.rope_tables(kv_len, head_dim, dtype=getattr(torch, dtype), device=device)
    return q, k, v, cos, sin


def _plan(case: dict, device: str, q, k, v, cos, sin):
    import kernels

    tile = kernels.Tile(**case["tile"])
    rotate_k = SHAPES[device][case["shape"]][6]
    if case["generation"] == 3:
        lens = torch_lens(device, case["shape"], q.device)
        return tile, rotate_k, {}, kernels.plan_decode_varlen(q, k, v, cos, sin, lens, tile=tile)
    if case["generation"] == 1:
        how = {"fused": case["rope"] == "fused"}
    else:
        variant = (
            kernels.Variant(tma=True, decode_reduce_in_kernel=True) if case["merge"] == "in_kernel" else None
        )
        how = {"rope": case["rope"], "variant": variant}
    return tile, rotate_k, how, kernels.plan(q, k, v, cos, sin, tile=tile, rotate_k=rotate_k, **how)


def torch_lens(shapes: str, shape: str, device) -> object:
    """Generation 3's (B,) int32 kv_lens of a varlen shape (KV_LENS); None for the others."""
    import torch

    if shape not in KV_LENS[shapes]:
        return None
    return torch.tensor(KV_LENS[shapes][shape], dtype=torch.int32, device=device)


def _specs(p) -> list:
    """The plan's LaunchSpecs (Plan.specs; the recorded tree kept them in Plan._launches)."""
    return list(p.specs) if hasattr(p, "specs") else [launch.spec for launch in p._launches]


def run_case(case: dict, device: str, what: str) -> dict:
    """{'out': .., 'launches': [[kernel, grid], ..]} (outputs) and/or {'ir': [..]} of one case.
    The IR is always of the GPU shapes and dtype (on CPU too: nothing runs, so size is free)."""
    import torch

    import kernels

    shapes = "cpu" if what == "outputs" else "cuda"
    q, k, v, cos, sin = _inputs(SHAPES[shapes][case["shape"]], DTYPE[shapes], device)
    tile, rotate_k, how, p = _plan(case, shapes, q, k, v, cos, sin)
    specs = _specs(p)
    result = {}
    if what in ("outputs", "both"):
        result["launches"] = [[spec.kernel.__name__, list(spec.grid)] for spec in specs]
        if case["generation"] == 1:
            out = kernels.attention(q, k, v, cos, sin, tile=tile, rotate_k=rotate_k, **how)
        elif case["generation"] == 3:
            out = p.run(q, k, v, cos, sin, torch_lens(shapes, case["shape"], q.device))
        else:
            out = p.run(q, k, v, cos, sin)
        result["out"] = _blake3(out.contiguous().view(-1).view(torch.uint8).cpu().numpy().tobytes())
    if what in ("ir", "both"):
        tensors = {"q": q, "k": k, "v": v, "cos": cos, "sin": sin, **p._scratch}
        tensors["out"] = torch.empty_like(q)
        tensors["kv_lens"] = torch_lens(shapes, case["shape"], q.device)
        resolve = _module(kernels, "launch", "_launch").resolve
        result["ir"] = [
            _ir(spec, {n: resolve(x, tensors) for n, x in spec.args.items()}, device) for spec in specs
        ]
    return result


def _ir(spec, args: dict, device: str) -> dict:
    """Hashes of one launch's compiled TTGIR and PTX (locations and debug info stripped)."""
    if device == "cuda":
        compiled = spec.kernel.warmup(**args, grid=spec.grid, **spec.options)
    else:
        compiled = _compile_sm90(spec.kernel, args, spec.options)
    return {
        "kernel": spec.kernel.__name__,
        "grid": list(spec.grid),
        "ttgir": _blake3(renumber_ttgir(strip_ttgir(compiled.asm["ttgir"])).encode()),
        "ptx": _blake3(strip_ptx(compiled.asm["ptx"]).encode()),
    }


def _compile_sm90(kernel, args: dict, options: dict):
    """Compile for the H200 without one: Triton's own binder specialises the arguments (dtypes,
    16-byte alignment, ints equal to 1) as JITFunction.run does on a GPU, then triton.compile."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    kwargs = dict(options, debug=kernel.debug or triton.knobs.runtime.debug)
    kwargs["instrumentation_mode"] = triton.knobs.compilation.instrumentation_mode
    kwargs["fpsan_homomorphic_casts"] = triton.knobs.compilation.fpsan_homomorphic_casts
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, parsed = binder(**args, **kwargs)
    parsed, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, specialization, parsed)
    return triton.compile(
        ASTSource(kernel, signature, constexprs, attrs), target=target, options=parsed.__dict__
    )


def _strip_calls(text: str, word: str) -> str:
    """text without every `word(...)` (balanced parentheses) that is a word of its own (so `loc(`
    goes, `local_alloc(` stays)."""
    out, i = [], 0
    pattern = re.compile(rf"(?<![\w.]){re.escape(word)}\(")
    while (match := pattern.search(text, i)) is not None:
        out.append(text[i : match.start()].rstrip(" "))
        depth, i = 0, match.end() - 1
        while True:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
            if depth == 0:
                break
    return "".join(out) + text[i:]


def strip_ttgir(text: str) -> str:
    """TTGIR without #loc definitions and loc(...) annotations (they hold file paths and lines)."""
    lines = [line for line in text.splitlines() if not line.startswith("#loc")]
    return _strip_calls("\n".join(lines), "loc")


def renumber_ttgir(text: str) -> str:
    """Stripped TTGIR as MLIR prints it back after parsing it with Triton's own dialects: the same
    module with its SSA values named %0, %1, %arg0, %c0_i32 by MLIR's scoped numbering instead of
    the source's variable names (%acc, %stride_qb), which Triton 3.9 prints from its name
    locations; anything but names that differs still differs."""
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend

    context = ir.context()
    ir.load_dialects(context)
    make_backend(GPUTarget("cuda", 90, 32)).load_dialects(context)
    with tempfile.TemporaryDirectory(prefix="bit-identity-ttgir-") as folder:
        path = Path(folder) / "kernel.ttgir"
        path.write_text(text)
        printed = str(ir.parse_mlir_module(str(path), context))
    return strip_ttgir(printed)  # the parser's own locations (the temporary file's lines) go too


def strip_ptx(text: str) -> str:
    """PTX without .loc/.file directives, DWARF sections (paths and line numbers) and the
    $L__tmp<n> labels LLVM defines for those sections' scopes (no instruction names one; an
    inlined call site moved to another line adds or drops one)."""
    text = re.sub(r"\.section\s+\.debug\w*\s*\{.*?\n\s*\}", "", text, flags=re.S)
    debug = re.compile(r"\s*\.(loc|file)\b|\$L__tmp\d+:\s*$")
    return "\n".join(line for line in text.splitlines() if not debug.match(line))


def _blake3(data: bytes) -> str:
    import blake3

    return blake3.blake3(data).hexdigest()


def write(root: Path, out: Path, device: str, jobs: int, only: str | None = None) -> None:
    todo = [c for c in cases() if only is None or only in c["key"]]
    passes = [("both", False)] if device == "cuda" else [("outputs", True), ("ir", False)]
    results: dict[str, dict] = {c["key"]: {} for c in todo}
    for what, interpret in passes:
        with tempfile.TemporaryDirectory(prefix="bit-identity-cache-") as cache:
            init = (str(root), device, interpret, cache)
            ctx = get_context("spawn")
            with ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_worker_init, initargs=init) as pool:
                futures = {c["key"]: pool.submit(run_case, c, device, what) for c in todo}
                for key, future in futures.items():
                    results[key].update(future.result())
    record = {"root": str(root), "device": device, "shapes": SHAPES, "dtypes": DTYPE, "cases": results}
    out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"{out}: {len(results)} cases from {root}/kernels on {device}")


def compare(a_path: Path, b_path: Path) -> int:
    """0 when every case's outputs, launches and IR hashes agree; 1 naming each difference."""
    a, b = (json.loads(Path(p).read_text()) for p in (a_path, b_path))
    differ = [
        f"{k}: only in {a_path if k in a['cases'] else b_path}" for k in a["cases"].keys() ^ b["cases"].keys()
    ]
    counts = {"out": 0, "launches": 0, "ir": 0}
    for key in sorted(a["cases"].keys() & b["cases"].keys()):
        x, y = a["cases"][key], b["cases"][key]
        for field in counts:
            if field in x or field in y:
                if x.get(field) == y.get(field):
                    counts[field] += 1
                else:
                    differ.append(f"{key}: {field} differs: {x.get(field)} vs {y.get(field)}")
    shared = len(a["cases"].keys() & b["cases"].keys())
    print(f"{shared} cases; equal: " + ", ".join(f"{f} {n}/{shared}" for f, n in counts.items()))
    for line in differ:
        print("DIFFERS", line)
    return 1 if differ else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), type=Path)
    parser.add_argument("command", nargs="?", choices=["write"])
    parser.add_argument("out", nargs="?", type=Path)
    parser.add_argument("--root", type=Path, default=REPO, help="folder holding the kernels/ to check")
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None)
    parser.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1))
    parser.add_argument("--only", help="only the cases whose key holds this text (e.g. g2/q_fused)")
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.command != "write" or args.out is None:
        parser.error("give `write OUT.json` or `--compare A.json B.json`")
    if not (args.root / "kernels" / "__init__.py").is_file():
        parser.error(f"--root {args.root}: no kernels/__init__.py there")
    device = args.device or ("cuda" if _has_gpu() else "cpu")
    write(args.root.resolve(), args.out, device, args.jobs, args.only)
    return 0


def _has_gpu() -> bool:
    import subprocess

    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0


if __name__ == "__main__":
    sys.exit(main())
