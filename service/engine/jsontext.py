"""JSON strings that are not Unicode text.

JSON may spell half of a UTF-16 surrogate pair on its own (``"\\ud800"``); ``json.loads``
turns it into a Python string that cannot be encoded as UTF-8, so the first hash, database
write or JSON response that meets it fails. Records (JSONL) and request bodies refuse such a
string where they decode it, naming it.
"""

from __future__ import annotations

import re
from typing import Any

_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def may_hold_surrogate(raw: bytes | str) -> bool:
    """Whether JSON text has a ``\\uD800``-``\\uDFFF`` escape: without one no decoded string
    holds a lone surrogate (a pair decodes to one character; UTF-8 cannot spell one), so the
    common document need not be walked."""
    if isinstance(raw, bytes):
        return re.search(_ESCAPE.pattern.encode(), raw) is not None
    return _ESCAPE.search(raw) is not None


def lone_surrogate(doc: Any) -> str | None:
    """The path (``a.b[2]``; ``""`` for the document itself) of a string that holds a lone
    surrogate, key or value (the first in document order, an object's keys before its
    values); None if there is none. Iterative: a document nests as deep as its decoder allows."""
    stack: list[tuple[Any, str]] = [(doc, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return path
        elif isinstance(item, dict):
            for key in item:
                if _SURROGATE.search(key):
                    return f"a key of {path or 'the document'}"
            stack.extend((value, f"{path}.{key}" if path else key) for key, value in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((value, f"{path}[{i}]") for i, value in reversed(list(enumerate(item))))
    return None


HALF_PAIR = "holds half of a UTF-16 surrogate pair (strings must be Unicode text)"

__all__ = ["HALF_PAIR", "lone_surrogate", "may_hold_surrogate"]
