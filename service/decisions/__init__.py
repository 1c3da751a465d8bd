"""Stateless live decisions (SPEC §7): ``POST /v1/decisions``."""
