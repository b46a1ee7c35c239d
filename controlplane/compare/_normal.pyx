"""`normal(text)`: an input's text as its identity is read (fingerprint.normalise_text: NFKC,
whitespace runs collapsed to one space, trimmed), in one native scan.

NFKC in the standard library walks every character of a text that is not already in NFKC,
so one full-width comma makes a 3,000-character Chinese reply cost hundreds of
microseconds. Here the text is split before each character that NFKC leaves as it is and
that nothing before it can combine with (canonical combining class 0, NFKC quick check
"yes": ASCII, Latin-1 and Cyrillic letters, CJK punctuation, kana, CJK ideographs, Hangul
syllables; tests/ingest/test_native_normal.py checks every one of them against the Unicode
database): normalising each piece alone gives what normalising the whole gives (UAX #15,
"Stable Code Points"), and only the pieces that hold another character are normalised.
"""

from cpython.unicode cimport Py_UNICODE_ISSPACE
from libc.stdlib cimport free, malloc


cdef extern from "Python.h":
    int PyUnicode_4BYTE_KIND
    str PyUnicode_FromKindAndData(int kind, const void *buffer, Py_ssize_t size)

from unicodedata import normalize

# The ranges `_boundary` accepts, for the test that checks them (inclusive).
BOUNDARY_RANGES = (
    (0x0000, 0x009F),
    (0x00BF, 0x0131),
    (0x0400, 0x0482),
    (0x0488, 0x052F),
    (0x3001, 0x3029),
    (0x303B, 0x3098),
    (0x30A0, 0x30FE),
    (0x3400, 0xA66E),
    (0xABEE, 0xD7FF),
)


cdef inline bint _boundary(Py_UCS4 c) noexcept:
    if c < 0xA0:
        return True
    if c < 0x3001:
        return (0xBF <= c <= 0x131) or (0x400 <= c <= 0x482) or (0x488 <= c <= 0x52F)
    return (
        c <= 0x3029
        or 0x303B <= c <= 0x3098
        or 0x30A0 <= c <= 0x30FE
        or 0x3400 <= c <= 0xA66E
        or 0xABEE <= c <= 0xD7FF
    )


def nfkc(str text):
    """unicodedata.normalize("NFKC", text), normalising only the pieces that need it."""
    if text.isascii():
        return text  # ASCII is its own NFKC
    cdef Py_ssize_t n = len(text), i = 0, j, done = 0, start
    cdef Py_UCS4 c
    cdef list pieces = None
    while i < n:
        c = text[i]
        if _boundary(c):
            i += 1
            continue
        if (0xFF01 <= c <= 0xFF5E or c == 0x3000) and (i + 1 == n or _boundary(text[i + 1])):
            # A full-width form or the ideographic space between two boundaries: its NFKC
            # is the ASCII character it stands for, which nothing combines with.
            if pieces is None:
                pieces = []
            pieces.append(text[done:i])
            pieces.append(chr(<long>c - 0xFEE0) if c != 0x3000 else " ")
            done = i = i + 1
            continue
        # A run of other characters, with the one before it (it may combine with them).
        start = i - 1 if i > done else i
        j = i + 1
        while j < n and not _boundary(text[j]):
            j += 1
        if pieces is None:
            pieces = []
        pieces.append(text[done:start])
        pieces.append(normalize("NFKC", text[start:j]))
        done = i = j
    if pieces is None:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


def normal(str text):
    """" ".join(unicodedata.normalize("NFKC", text).split())"""
    cdef str folded = nfkc(text)
    cdef Py_ssize_t n = len(folded), i, size = 0
    cdef Py_UCS4 c
    cdef bint gap = False
    cdef Py_UCS4 *out = <Py_UCS4 *> malloc((n + 1) * sizeof(Py_UCS4))
    if out == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            c = folded[i]
            if Py_UNICODE_ISSPACE(c):
                gap = size > 0
                continue
            if gap:
                out[size] = 0x20
                size += 1
                gap = False
            out[size] = c
            size += 1
        return PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, out, size)
    finally:
        free(out)
