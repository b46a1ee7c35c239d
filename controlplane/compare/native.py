"""Which text reader runs: the compiled one, or the Python reference.

The compiled reader (the Cython modules `_counts`, `_numbers`, `_spans` and `_mask` beside
this file, built by `pip install .` where a C compiler exists) reads a text's sentences,
length, negations, numbers and named spans, and finds what the masker replaces, in native
scans over its code points. It gives exactly what the Python reader in conservation.py and
redaction.py gives (tests/ingest/test_native_*.py); the Python reader stays the reference,
and runs wherever the extension is not built.

SHADOWPLANE_TEXT_READER chooses: `auto` (the default: compiled when built), `python`, or
`native` (compiled, and an ImportError naming the cause when it is not built: the test
suite uses it so that a build failure cannot pass unnoticed).
"""

from __future__ import annotations

import os
from types import ModuleType

ENV = "SHADOWPLANE_TEXT_READER"
CHOICES = ("auto", "python", "native")


def _load() -> tuple[ModuleType, ModuleType, ModuleType, ModuleType] | None:
    choice = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if choice not in CHOICES:
        raise ValueError(f"{ENV}={choice!r}: must be one of {', '.join(CHOICES)}")
    if choice == "python":
        return None
    try:
        from controlplane.compare import _counts, _mask, _numbers, _spans
    except ImportError as exc:
        if choice == "native":
            raise ImportError(
                f"{ENV}=native but the compiled text reader is not built ({exc}): "
                "install with a C compiler (pip install .) or build it in place "
                "(python setup.py build_ext --inplace)"
            ) from exc
        return None
    return _counts, _numbers, _spans, _mask


_modules = _load()
# True when the compiled reader runs (logged at startup, `shadowplane_native_reader`).
ACTIVE = _modules is not None


def reader_name() -> str:
    """The reader that runs, in words (for the startup log)."""
    if ACTIVE:
        return "the compiled (native) text reader"
    return "the Python text reader (the compiled one is not built here)"
