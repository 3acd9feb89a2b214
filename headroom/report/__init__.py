"""Stage `report`: HTML and Markdown report of a study, from its artifacts (build.py, templates/)."""
