"""Large uploads parsed in a short-lived separate process.

Parsing a CSV or JSONL upload is pure-Python work (a dict per record) interleaved with long
single calls (decoding, ``sorted(set(...))`` of every name, building arrays). In a thread it
still holds the GIL: a valid 26 MB upload of 500,000 records held the event loop for up to
0.4 s at a time (measured as the lag of a 1 ms sleep beside it). Past ``parse_process_bytes``
the bytes go to a fresh spawned process (one per upload: the ~17x memory peak of parsing is
returned to the system when it exits) and the ``Records`` come back; they are small (one
name per distinct system and task, arrays for the rest). Errors come back as raised.
"""

from __future__ import annotations

import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor

from service.engine.records import RecordLimits, Records, parse_records


def parse_upload(content: bytes, fmt: str | None, limits: RecordLimits | None, in_process_below: int) -> Records:
    """``parse_records`` here for a small input, in a separate process for a large one."""
    if len(content) <= in_process_below:
        return parse_records(content, fmt=fmt, limits=limits)
    with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(_parse, content, fmt, limits).result()


def _parse(content: bytes, fmt: str | None, limits: RecordLimits | None) -> Records:
    return parse_records(content, fmt=fmt, limits=limits)
