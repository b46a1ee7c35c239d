"""The Python client for routing services (README.md, "For routing services").

    FlagClient       the flags, kept current in one daemon thread (the stream, else ETag
                     polling); `route(task, ...)` answers from memory, cloud when in doubt
    ResultReporter   results posted in background batches; never blocks or raises
    shadow_compare   serve the chosen side, run the other beside it, report the pair
                     (`async_shadow_compare` for coroutines; `shadow_stats` counts
                     calls refused because their pool was held by hung calls)
    resolve          both sides on the serving path: equal -> edge, different -> cloud,
                     irreversible -> need_confirm
    evaluate, route  the routing rule itself, pure (every door of the control plane uses it)
    sticky_bucket    murmur3_32(utf8(task + ":" + key), seed 0) % 100
    verify_signature checks a webhook delivery

It needs the standard library and `httpx` only and imports itself relatively, so the
folder can be copied into a router's repository under any name.
"""

from .flags import FlagClient, FlagStatus
from .reporter import ResultReporter
from .resolve import Resolution, resolve
from .routing import Evaluation, Route, evaluate, route
from .shadow import async_shadow_compare, shadow_compare, shadow_stats
from .sticky import murmur3_32, sticky_bucket
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
]
