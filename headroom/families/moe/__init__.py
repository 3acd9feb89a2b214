"""Fused MoE as a family (issue 34): kernels/moe.py's grouped GEMM under per-M config tables.

``family``: the family (its layers QWEN3, MIXTRAL and the interpreter's SMOKE); ``space``: the tuning
grid, the standard token counts and the default config of an untuned shape; ``tune``: `headroom tune`,
a per-M table in the ecosystem's JSON format from our own benchmark; ``tables/``: the tables committed
with the command that made them (tables/README.md)."""
