"""Stage `report`: HTML and Markdown report of a study, from its artifacts (build.py, templates/)."""

import matplotlib

matplotlib.use("Agg")  # no display: figures are files (set before any section imports pyplot)
