"""Generation 1, frozen: the kernels the first studies recorded (fused=True/False), kept apart so
the recorded studies reproduce by construction. Edit nothing here; a new kernel is a new
generation one floor up (kernels/jit/, kernels/{prefill,decode,rope}.py).

    _attention.py  prefill, split-KV decode and reduction kernels (@triton.jit, as recorded)
    _rope.py       the standalone RoPE kernel and the load-and-rotate helper (as recorded)
    attention.py   run (the eager attention(fused=...) call) and attention_specs (its launches)
    rope.py        the standalone RoPE launcher the unfused candidates run first
"""

from .attention import attention_specs, launch, run
from .rope import rope_spec

__all__ = ["attention_specs", "launch", "rope_spec", "run"]
