"""Sufficiency: when is a partial agent-benchmark run enough?"""

__version__ = "0.1.0"
