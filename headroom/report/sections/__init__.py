"""One module per report section; each ``section(...)`` returns a ``headroom.report.model.Section``."""
