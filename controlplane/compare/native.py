"""Which text reader runs: the compiled one, or the Python reference.

The compiled reader (the Cython modules `_counts`, `_numbers`, `_spans`, `_mask` and
`_normal` beside this file, built by `pip install .` where a C compiler exists) reads a
text's sentences, length, negations, numbers and named spans, finds what the masker
replaces, and normalises an input's text for its identity, in native scans over its code
points. It gives exactly what the Python reader in conservation.py, redaction.py and
fingerprint.py gives (tests/ingest/test_native_*.py); the Python reader stays the reference,
and runs wherever the extension is not built.

SHADOWPLANE_TEXT_READER chooses: `auto` (the default: compiled when built), `python`, or
`native` (compiled, and an ImportError naming the cause when it is not built: the test
suite uses it so that a build failure cannot pass unnoticed).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from importlib import import_module
from typing import Any, NamedTuple

ENV = "SHADOWPLANE_TEXT_READER"
CHOICES = ("auto", "python", "native")
# The compiled modules (controlplane/compare/_<name>.pyx), each giving the function <name>.
MODULES = ("counts", "numbers", "spans", "mask", "normal")
# Further entry points: (the Compiled field, the module giving a function of that name).
MORE = (
    ("read", "spans"),
    ("mask_many", "mask"),
    ("multiset_diff", "counts"),
    ("set_diff", "counts"),
)


class Compiled(NamedTuple):
    """The compiled reader's entry points, each equal to its Python reference."""

    # (conservation.sentence_count, length, negations) of a text.
    counts: Callable[[str], tuple[int, int, Counter[str]]]
    # conservation.numbers of the text with its spans blanked out.
    numbers: Callable[[str], Counter[str]]
    # (conservation.spans(text).named, .rest).
    spans: Callable[[str], tuple[frozenset[str], str]]
    # conservation.read_python(text)'s fields in order (sentences, length, negations,
    # numbers, spans): the three above in one call on one copy of the text.
    read: Callable[[str], tuple[int, int, Counter[str], Counter[str], frozenset[str]]]
    # Masker._mask(text), numbering in the Masker's (placeholders, counts).
    mask: Callable[[str, dict[tuple[str, str], str], dict[str, int]], str]
    # [mask(text, ...) for text in texts] in one call (a diff's lists of short strings), or
    # None unless every item is a string of at most max_chars (the last argument).
    mask_many: Callable[
        [list[Any], dict[tuple[str, str], str], dict[str, int], int], list[str] | None
    ]
    # comparators.multiset_diff and set_diff: a failed check's sorted lists, in one walk.
    multiset_diff: Callable[
        [Counter[str], Counter[str]], tuple[list[str], list[str], list[str], list[str]]
    ]
    set_diff: Callable[
        [frozenset[str], frozenset[str]], tuple[list[str], list[str], list[str], list[str]]
    ]
    # fingerprint.normalise_text(text): NFKC, whitespace collapsed (an input's identity).
    normal: Callable[[str], str]


def _load() -> Compiled | None:
    choice = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if choice not in CHOICES:
        raise ValueError(f"{ENV}={choice!r}: must be one of {', '.join(CHOICES)}")
    if choice == "python":
        return None
    try:
        modules = {name: import_module(f"controlplane.compare._{name}") for name in MODULES}
        entries = {name: getattr(modules[name], name) for name in MODULES}
        entries.update((name, getattr(modules[module], name)) for name, module in MORE)
    except (ImportError, AttributeError) as exc:  # AttributeError: built from older sources
        if choice == "native":
            raise ImportError(
                f"{ENV}=native but the compiled text reader is not built ({exc}): "
                "install with a C compiler (pip install .) or build it in place "
                "(python setup.py build_ext --inplace)"
            ) from exc
        return None
    return Compiled(**entries)


# The compiled reader when it runs, else None (the Python reader runs).
READER = _load()
# Logged at startup and exported on /metrics as `shadowplane_native_reader`.
ACTIVE = READER is not None


def reader_name() -> str:
    """The reader that runs, in words (for the startup log)."""
    if ACTIVE:
        return "the compiled (native) text reader"
    if os.environ.get(ENV, "").strip().lower() == "python":
        return f"the Python text reader ({ENV}=python)"
    return "the Python text reader (the compiled one is not built here)"
