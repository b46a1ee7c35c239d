"""What the client keeps going in a child process forked from a router's (gunicorn
`--preload`, README's module-level clients): each object registered here is told, in the
child, that the threads, connections and locks it had are the parent's (`_forked`)."""

from __future__ import annotations

import logging
import os
import weakref
from typing import Protocol

log = logging.getLogger("shadowplane.client")


class Forkable(Protocol):
    def _forked(self) -> None: ...


_LIVE: weakref.WeakSet[Forkable] = weakref.WeakSet()


def follow(thing: Forkable) -> None:
    """Tell `thing` when the process forks (in the child); forgotten once it is collected."""
    _LIVE.add(thing)


def _in_child() -> None:
    for thing in list(_LIVE):
        try:
            thing._forked()
        except Exception:  # the child must go on: what it reports or routes then degrades
            log.exception("%s could not start again in a forked process", type(thing).__name__)


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_in_child)
