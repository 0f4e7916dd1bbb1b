"""Example pipelines on oncelog (run them from the repository root: ``python -m examples...``)."""
