"""`normal(text)`: an input's text as its identity is read (fingerprint.normalise_text: NFKC,
whitespace runs collapsed to one space, trimmed), in one native scan.

NFKC in the standard library walks every character of a text that is not already in NFKC,
so one full-width comma makes a 3,000-character Chinese reply cost hundreds of
microseconds. Here the text is split before each character that NFKC leaves as it is and
that nothing before it can combine with (canonical combining class 0, NFKC quick check
"yes": ASCII, Latin-1 and Cyrillic letters, dashes and quotation marks, CJK punctuation,
kana, CJK ideographs, Hangul syllables; tests/ingest/test_native_normal.py checks every one of them against the Unicode
database): normalising each piece alone gives what normalising the whole gives (UAX #15,
"Stable Code Points"), and only the pieces that hold another character are normalised.
"""

from cpython.unicode cimport Py_UNICODE_ISSPACE, PyUnicode_DATA, PyUnicode_KIND, PyUnicode_READ
from libc.stdint cimport uint16_t, uint32_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp


cdef extern from "Python.h":
    int PyUnicode_1BYTE_KIND
    int PyUnicode_4BYTE_KIND
    str PyUnicode_FromKindAndData(int kind, const void *buffer, Py_ssize_t size)

from unicodedata import combining, is_normalized, normalize

from controlplane.compare.streamsafe import LONGEST_SAFE, MARKED_RANGES, stream_safe

# The ranges `_boundary` accepts, for the test that checks them (inclusive).
BOUNDARY_RANGES = (
    (0x0000, 0x009F),
    (0x00BF, 0x0131),
    (0x0400, 0x0482),
    (0x0488, 0x052F),
    (0x2012, 0x2016),
    (0x2018, 0x2023),
    (0x3001, 0x3029),
    (0x303B, 0x3098),
    (0x30A0, 0x30FE),
    (0x3400, 0xA66E),
    (0xABEE, 0xD7FF),
)


# Runs normalised one call each, at most; the rest of a text with more goes in one call.
cdef enum:
    MAX_RUNS = 32


cdef inline bint _boundary(Py_UCS4 c) noexcept:
    if c < 0xA0:
        return True
    if c < 0x3001:
        return (
            0xBF <= c <= 0x131
            or 0x400 <= c <= 0x482
            or 0x488 <= c <= 0x52F
            or 0x2012 <= c <= 0x2016
            or 0x2018 <= c <= 0x2023
        )
    return (
        c <= 0x3029
        or 0x303B <= c <= 0x3098
        or 0x30A0 <= c <= 0x30FE
        or 0x3400 <= c <= 0xA66E
        or 0xABEE <= c <= 0xD7FF
    )


cdef struct Out:
    Py_UCS4 *chars
    Py_ssize_t size
    Py_ssize_t cap
    bint gap  # whitespace seen since the last character put


# No character past U+3000 (the ideographic space) is white space (str.isspace), so the
# CJK text past it needs no look-up (tests/ingest/test_native_classes.py checks it).
cdef enum:
    LAST_SPACE = 0x3000


cdef inline bint _space(Py_UCS4 c) noexcept:
    return <unsigned int>c <= LAST_SPACE and Py_UNICODE_ISSPACE(c)


cdef inline int _put(Out *out, Py_UCS4 c) except -1:
    """Append `c`, whitespace runs collapsed to one space and none at either end."""
    cdef Py_UCS4 *grown
    if _space(c):
        out.gap = out.size > 0
        return 0
    if out.size + 2 > out.cap:
        grown = <Py_UCS4 *> realloc(out.chars, 2 * out.cap * sizeof(Py_UCS4))
        if grown == NULL:
            raise MemoryError()
        out.chars = grown
        out.cap *= 2
    if out.gap:
        out.chars[out.size] = 0x20
        out.size += 1
        out.gap = False
    out.chars[out.size] = c
    out.size += 1
    return 0


cdef object _collapsed_latin1(str text):
    """" ".join(text.split()) of a text of one byte a character (Latin-1) whose every
    character is its own NFKC (and so the whole text is: no Latin-1 character combines
    with the one before it), in one scan over its bytes; the text itself when nothing is
    collapsed or trimmed. None when a character is not its own NFKC (², ½, the no-break
    space...): the caller normalises. Split and join make a string a word, 5 ns a
    character; NFKC's quick check alone costs 2 ns."""
    cdef Py_ssize_t n = len(text), i, size = 0
    cdef const unsigned char *data = <const unsigned char *> PyUnicode_DATA(text)
    cdef unsigned char c, what
    cdef bint gap = False
    cdef char *chars = <char *> malloc(n + 1)
    if chars == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            c = data[i]
            what = _LATIN1[c]
            if what == KEEP:
                if gap:
                    chars[size] = 0x20
                    size += 1
                    gap = False
                chars[size] = c
                size += 1
            elif what == SPACE:
                gap = size > 0
            else:
                return None
        if size == n and memcmp(chars, data, n) == 0:
            return text  # nothing collapsed, trimmed or turned into a space
        return PyUnicode_FromKindAndData(PyUnicode_1BYTE_KIND, chars, size)
    finally:
        free(chars)


# What each Latin-1 character is to the scan above: white space to str.split(), its own
# NFKC (kept), or neither (the text goes the general way).
cdef enum:
    KEEP = 0
    SPACE = 1
    OTHER = 2

cdef unsigned char _LATIN1[256]
for _code in range(256):
    if Py_UNICODE_ISSPACE(_code):
        _LATIN1[_code] = SPACE
    elif normalize("NFKC", chr(_code)) == chr(_code) and not combining(chr(_code)):
        _LATIN1[_code] = KEEP
    else:
        _LATIN1[_code] = OTHER


# The characters of streamsafe.MARKED_RANGES (an NFKD holding a non-starter), a bit each
# (none is past U+1FFFF, none below U+00A8 nor among the CJK ideographs).
cdef enum:
    MARKED_END = 0x20000
    MARKED_BYTES = 0x4000  # MARKED_END / 8

cdef unsigned char _MARKED[MARKED_BYTES]
for _code in range(MARKED_BYTES):
    _MARKED[_code] = 0
for _first, _last in MARKED_RANGES:
    assert _last < MARKED_END and not (_first <= 0xA66E and _last >= 0x3400) and _first >= 0xA8
    for _code in range(_first, _last + 1):
        _MARKED[_code >> 3] |= 1 << (_code & 7)
cdef Py_ssize_t _LONGEST_SAFE = LONGEST_SAFE


cdef bint _long_run(unsigned int kind, const void *data, Py_ssize_t n) noexcept:
    """Whether the text holds a run of more than LONGEST_SAFE marked characters, which may
    need a joiner (streamsafe): one scan, a bit looked up a character (a text of one byte a
    character needs none: no Latin-1 character's NFKD begins with a non-starter)."""
    cdef Py_ssize_t i, run = 0
    cdef const uint16_t *two
    cdef const uint32_t *four
    cdef uint32_t code
    if kind == 2:
        two = <const uint16_t *> data
        for i in range(n):
            code = two[i]
            # Below U+00A8 and the CJK ideographs (U+3400-U+A66E): none is marked.
            if code < 0xA8 or 0x3400 <= code <= 0xA66E:
                run = 0
            elif (_MARKED[code >> 3] >> (code & 7)) & 1:
                run += 1
                if run > _LONGEST_SAFE:
                    return True
            else:
                run = 0
    elif kind == 4:
        four = <const uint32_t *> data
        for i in range(n):
            code = four[i]
            if 0xA8 <= code < MARKED_END and (_MARKED[code >> 3] >> (code & 7)) & 1:
                run += 1
                if run > _LONGEST_SAFE:
                    return True
            else:
                run = 0
    return False


def normal(str text):
    """" ".join(unicodedata.normalize("NFKC", streamsafe.stream_safe(text)).split()), in one
    pass: NFKC only on the pieces that need it."""
    cdef object latin1
    if PyUnicode_KIND(text) == PyUnicode_1BYTE_KIND:
        latin1 = _collapsed_latin1(text)
        if latin1 is not None:
            return latin1
    # A run of non-starters NFKC would sort in quadratic time is cut first (streamsafe).
    if _long_run(PyUnicode_KIND(text), PyUnicode_DATA(text), len(text)):
        text = stream_safe(text)
    # Its own NFKC already (a quick check over the text: most text in any script, Greek,
    # Arabic or Devanagari too): only the whitespace to collapse.
    cdef bint normalised = is_normalized("NFKC", text)
    cdef Py_ssize_t n = len(text), i = 0, j, k, runs = 0
    cdef Py_UCS4 c
    cdef unsigned int kind = PyUnicode_KIND(text)
    cdef void *data = PyUnicode_DATA(text)
    cdef str piece
    cdef Out out
    out.size = 0
    out.gap = False
    out.cap = n + 16
    out.chars = <Py_UCS4 *> malloc(out.cap * sizeof(Py_UCS4))
    if out.chars == NULL:
        raise MemoryError()
    try:
        while i < n:
            c = PyUnicode_READ(kind, data, i)
            if normalised or _boundary(c):
                _put(&out, c)
                i += 1
                continue
            if (0xFF01 <= c <= 0xFF5E or c == 0x3000) and (
                i + 1 == n or _boundary(PyUnicode_READ(kind, data, i + 1))
            ):
                # A full-width form or the ideographic space between two boundaries: its
                # NFKC is the ASCII character it stands for, which nothing combines with.
                _put(&out, <Py_UCS4> (<long> c - 0xFEE0) if c != 0x3000 else 0x20)
                i += 1
                continue
            # A run of other characters, normalised with the character before it (it may
            # combine with them): that one, put last, is taken back first.
            runs += 1
            if runs > MAX_RUNS:
                j = n  # a text of many short runs: the rest in one call, as the reference
            else:
                j = i + 1
                while j < n and not _boundary(PyUnicode_READ(kind, data, j)):
                    j += 1
            if i > 0:
                if not Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, i - 1)):
                    out.size -= 1
                i -= 1
            piece = normalize("NFKC", text[i:j])
            for k in range(len(piece)):
                _put(&out, piece[k])
            i = j
        return PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, out.chars, out.size)
    finally:
        free(out.chars)
