"""The engine's one input-error shape: which field is wrong and why (the API answers 422)."""

from __future__ import annotations


class FieldError(ValueError):
    """An input outside its domain; ``field`` names it, ``message`` says why."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")
