"""Payments: an exactly-once Spark pipeline on oncelog (see README.md)."""
