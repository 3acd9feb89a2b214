"""The built-in attention family: causal GQA attention, our Triton generations and PyTorch's natives
as its candidates (headroom.families.attention.family.ATTENTION), and the attention-only parts of the
pipeline (its candidates table, runner, input sets, correctness gate, portfolio timing, lifecycle
costs, graph sweep, policy keys and layer model). Modules outside this package that are shared by
every family (headroom.measure, headroom.policies, headroom.decide) name no attention concept."""
