"""Placing a new entry on a stored leaderboard, live (SPEC §8.1)."""
