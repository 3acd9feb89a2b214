"""Names that reach the artifacts and whose text is the built-in attention family's: a policy, a reason
code, figures, columns. Every study, attention's or another family's, writes them as attention's
recorded studies do, so a recorded table keeps its meaning; the modules every family shares (policies,
decide) read them here under names in the study's generic vocabulary: a family's *category* (its
category features' values; attention: prefill or decode) and a candidate's *base config* (what it is
apart from its fusion arm; attention: its tile). Imports nothing, so the lookup stays light.
"""

#: The policy with one candidate per category key: the obvious rule and the policy figure's baseline.
CATEGORY_KEYED = "phase-keyed"
#: The policy of a user's fixed per-M config table (a family's ``config_table``), scored beside the
#: fitted policies and never selected.
CONFIG_TABLE = "config-table"
#: The deployment-profile parts of a family captured by a feature (its ``captured_by``): its calls up
#: to the feature's capture limit (graph replay) and the larger ones (eager), ``<mode>@<part>``.
CAPTURED, UNCAPTURED = "captured", "uncaptured"
#: The reason code of a `stop` whose headroom one candidate per category captures (ship them).
CATEGORY_SPLIT = "phase-split"

# Figures of decision.parquet (one row each per mode).
#: One candidate per category: its net gain over one global candidate.
CATEGORY_SPLIT_GAIN = "phase_split_gain"
#: The selected policy's net gain over one candidate per category.
GAIN_VS_CATEGORY = "policy_gain_vs_phase"
#: The gap to the oracle, made of: the category split, ...
MADE_OF_CATEGORY_SPLIT = "made_of_phase_split"
#: ... the fusion arm chosen per invocation at the category-keyed base config, ...
MADE_OF_FUSION_WITHIN_CATEGORY = "made_of_fusion_within_phase"
#: ... and the base config chosen per invocation beyond that.
MADE_OF_BASE_WITHIN_CATEGORY = "made_of_tile_within_phase"

# Columns of policy_eval.parquet.
#: Stem of the cross-run net gain over category-keyed (``<stem>_pct``, ``_ci_low``, ``_ci_high``).
NET_GAIN_VS_CATEGORY_CV = "net_gain_vs_phase_cv"
#: A deployable policy's net gain over category-keyed on the validation slice (what is selected on).
VALIDATION_NET_GAIN_VS_CATEGORY = "validation_net_gain_vs_phase_pct"

#: The portfolio's column of a candidate's base config (an integer; candidates that differ only in
#: their fusion arm share it).
BASE_CONFIG = "tile"
#: The serving trace's category column: a step kind falls back to it where the trace records no step.
TRACE_CATEGORY = "phase"

#: The portfolio's backends of the candidates under study (attention's Triton kernels; a family's
#: own): every other backend is a native peer (a torch SDPA backend, FlexAttention, FlashInfer).
OURS_BACKENDS = ("triton", "family")

#: What each native backend (a candidate's ``backend`` other than ours) is, in a serving engineer's
#: words: what `headroom recommend` and the report call a native they ship (``native_words``).
NATIVE_WORDS = {
    "sdpa-cudnn": "PyTorch's cuDNN SDPA backend",
    "sdpa-flash": "PyTorch's FlashAttention-2 SDPA backend",
    "sdpa-efficient": "PyTorch's memory-efficient SDPA backend",
    "sdpa-math": "PyTorch's math SDPA backend (its reference)",
    "flex": "PyTorch's FlexAttention",
    "flashinfer-paged": "FlashInfer over a paged KV cache, as vLLM's FlashInfer backend runs it",
    "flashinfer-ragged": "FlashInfer's ragged prefill and tensor-core paged decode, as SGLang runs it",
}


def native_words(backend: str, rope: str | None = None) -> str:
    """'PyTorch's cuDNN SDPA backend, after the standalone RoPE kernel' of a native's backend and RoPE
    placement (``unfused``: our standalone RoPE kernel runs before it); a backend without words here
    by its name."""
    said = NATIVE_WORDS.get(backend) or f"the native backend {backend}"
    return f"{said}, after the standalone RoPE kernel" if rope == "unfused" else said
