"""Client of the Sufficiency service for benchmark harnesses: HTTP client, error tree, live monitor.

Depends on httpx only, so a harness installs it without the server stack. Install it from a clone
of the repository (the name is not published on PyPI):
``pip install ./clients/python``;
``pip install './clients/python[inspect]'`` adds the inspect_ai integration,
``sufficiency_client.inspect``.
"""

from sufficiency_client.client import (
    DEFAULT_URL,
    APIError,
    AsyncSufficiencyClient,
    AuthError,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    ServerError,
    SufficiencyClient,
    SufficiencyError,
    TransportError,
    UnexpectedResponseError,
    observation,
)
from sufficiency_client.harness import AsyncLiveMonitor, LiveMonitor, Verdict
from sufficiency_client.placement import AsyncPlacementMonitor, Placement, PlacementMonitor

__all__ = [
    "DEFAULT_URL",
    "APIError",
    "AsyncLiveMonitor",
    "AsyncPlacementMonitor",
    "AsyncSufficiencyClient",
    "AuthError",
    "ConflictError",
    "InvalidInputError",
    "LiveMonitor",
    "NotFoundError",
    "Placement",
    "PlacementMonitor",
    "ServerError",
    "SufficiencyClient",
    "SufficiencyError",
    "TransportError",
    "UnexpectedResponseError",
    "Verdict",
    "observation",
]
