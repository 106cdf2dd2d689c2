"""One module per scenario; each returns plain result objects for ``bench.report``."""
