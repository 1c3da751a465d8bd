"""``sufficiency-client`` installs without the server stack: its dependency tree (read from the
installed distributions' metadata) reaches httpx and, with ``[inspect]``, inspect-ai, but none of
the server's packages; importing it loads none of them.

inspect-ai (0.3.285) itself requires fastapi and uvicorn (for its log viewer, ``inspect view``):
with ``[inspect]`` those two come from inspect-ai, never from us; the rest of the server stack
is absent from the tree altogether."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

SERVER_ONLY = {"fastapi", "uvicorn", "sqlalchemy", "celery", "matplotlib", "alembic"}


def dependency_closure(
    root: str, extras: frozenset[str] = frozenset(), *, stop_at: frozenset[str] = frozenset()
) -> set[str]:
    """Every distribution ``pip install root[extras]`` pulls in, walked over the installed metadata
    (markers evaluated for this interpreter; extras of dependencies followed as requested);
    ``stop_at`` names distributions counted but not descended into."""
    seen: set[tuple[str, frozenset[str]]] = set()
    names: set[str] = set()
    stack = [(canonicalize_name(root), extras)]
    while stack:
        name, want = stack.pop()
        if (name, want) in seen:
            continue
        seen.add((name, want))
        names.add(name)
        if name in stop_at:
            continue
        for line in metadata.requires(name) or []:
            req = Requirement(line)
            if req.marker is not None and not any(req.marker.evaluate({"extra": extra}) for extra in (want | {""})):
                continue
            stack.append((canonicalize_name(req.name), frozenset(req.extras)))
    return names


def test_the_client_with_inspect_reaches_no_server_package() -> None:
    inspect = frozenset({"inspect"})
    tree = dependency_closure("sufficiency-client", inspect)
    assert {"httpx", "inspect-ai"} <= tree
    ours = dependency_closure("sufficiency-client", inspect, stop_at=frozenset({"inspect-ai"}))
    assert ours & SERVER_ONLY == set()
    assert tree & SERVER_ONLY <= {"fastapi", "uvicorn"}  # both required by inspect-ai itself
    assert dependency_closure("sufficiency-client") & {"inspect-ai", *SERVER_ONLY} == set()


def test_the_walk_sees_the_server_stack_where_it_is() -> None:
    # The same walk over the service's own distribution must find what the client must not have.
    assert SERVER_ONLY <= dependency_closure("sufficiency")


def test_importing_the_client_loads_no_server_module() -> None:
    code = (
        "import sys, sufficiency_client, sufficiency_client.harness\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(eval(out))  # a list literal printed by the child
    assert "httpx" in loaded
    assert loaded & (SERVER_ONLY | {"service", "workers", "numpy", "scipy", "inspect_ai"}) == set()
