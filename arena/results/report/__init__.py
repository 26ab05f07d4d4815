"""The HTML report of a run directory (``arena.results.report.html.write_report``) and the figures it shows."""
