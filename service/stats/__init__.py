"""Evaluation statistics endpoints (SPEC §8)."""
