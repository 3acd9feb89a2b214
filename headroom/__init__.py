"""headroom: is a shape-adaptive GPU kernel portfolio worth building, or is one global kernel enough?

The library behind the Snakemake pipeline: artifacts (hashing, provenance, catalog), config,
trace, timing, policies, roofline, decision, report and the `headroom` CLI.
"""

__version__ = "0.1.0"
