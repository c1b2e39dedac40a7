"""Runnable pipeline jobs: `python -m pipeline.jobs.<name> --help`, or through spark-submit."""
