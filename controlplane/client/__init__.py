"""The Python client for routing services (README.md, "For routing services"): `FlagClient`,
`ResultReporter`, `shadow_compare`, `resolve`, the routing rule (`evaluate`, `route`),
`sticky_bucket`, `wants_repeat` (the requests the cloud answers twice) and
`verify_signature`.

It needs the standard library and `httpx` only and imports itself relatively, so the
folder can be copied into a router's repository under any name.
"""

from .flags import FlagClient, FlagStatus
from .reporter import ResultReporter
from .resolve import Resolution, resolve
from .routing import Evaluation, Route, evaluate, route
from .shadow import async_shadow_compare, shadow_compare, shadow_stats
from .sticky import murmur3_32, sticky_bucket, wants_repeat
from .webhooks import verify_signature

__all__ = [
    "Evaluation",
    "FlagClient",
    "FlagStatus",
    "Resolution",
    "ResultReporter",
    "Route",
    "async_shadow_compare",
    "evaluate",
    "murmur3_32",
    "resolve",
    "route",
    "shadow_compare",
    "shadow_stats",
    "sticky_bucket",
    "verify_signature",
    "wants_repeat",
]
