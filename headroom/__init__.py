"""headroom: is a shape-adaptive GPU kernel portfolio worth building, or is one global kernel enough?

The library behind the Snakemake pipeline, one subpackage per stage group: core (artifacts,
contracts, config, stage harness, catalog, CLI), trace, measure, analysis and report
(docs/architecture.md).
"""

__version__ = "0.1.0"
