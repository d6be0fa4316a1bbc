"""Benchmarks for multusd. Run ``tox -e bench`` (or ``python -m bench``) as root."""
