"""JSON strings that are not Unicode text.

JSON may spell half of a UTF-16 surrogate pair on its own (``"\\ud800"``); ``json.loads``
turns it into a Python string that cannot be encoded as UTF-8, so the first hash, database
write or JSON response that meets it fails. Records (JSONL) and request bodies refuse it where
they decode it, naming the string. (A NUL is text: names carrying one round-trip, issue 7;
the few fields kept in a PostgreSQL text column refuse it themselves, ``service.names``.)
"""

from __future__ import annotations

import re
from typing import Any

_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_ESCAPE_BYTES = re.compile(_ESCAPE.pattern.encode())
_NOT_TEXT = re.compile("[\ud800-\udfff]")
_HALF_PAIR = "holds half of a UTF-16 surrogate pair (strings must be Unicode text)"


def may_hold_non_text(raw: bytes | str) -> bool:
    """Whether JSON text has a ``\\uD800``-``\\uDFFF`` escape: without one no decoded string
    holds half a pair (a pair decodes to one character; UTF-8 cannot spell half of one), so
    the common document need not be walked."""
    if isinstance(raw, bytes):
        return _ESCAPE_BYTES.search(raw) is not None
    return _ESCAPE.search(raw) is not None


def non_text(doc: Any) -> str | None:
    """Where (``a.b[2]`` and what) a string of ``doc``, key or value, is not text: the first in
    document order, an object's keys before its values; None if there is none. Iterative: a
    document nests as deep as its decoder allows."""
    stack: list[tuple[Any, str]] = [(doc, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if _NOT_TEXT.search(item):
                return f"{path or 'the document'} {_HALF_PAIR}"
        elif isinstance(item, dict):
            for key in item:
                if _NOT_TEXT.search(key):
                    return f"a key of {path or 'the document'} {_HALF_PAIR}"
            stack.extend((value, f"{path}.{key}" if path else key) for key, value in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((value, f"{path}[{i}]") for i, value in reversed(list(enumerate(item))))
    return None


__all__ = ["may_hold_non_text", "non_text"]
