"""Triton kernels only (@triton.jit functions); the launchers are one floor up."""
