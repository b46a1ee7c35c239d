"""The Python client for routing services (README.md, "For routing services").

For now it holds `sticky_bucket`, the one function every client must compute alike, and
`verify_signature`, which webhook receivers call on every delivery; flag polling and the
OpenFeature provider arrive with the flag-serving step. It depends on nothing but the
standard library, so routers can vendor it.
"""

from .sticky import murmur3_32, sticky_bucket
from .webhooks import verify_signature

__all__ = ["murmur3_32", "sticky_bucket", "verify_signature"]
