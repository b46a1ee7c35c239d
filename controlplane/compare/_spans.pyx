# cython: language_level=3
# The named spans of a text and the text without them, natively: what
# conservation.spans(text) gives as (named, rest), exactly, in one linear scan per part
# (phones, emails and URLs by _findspans.pxi; ID-like tokens, quoted spans and
# capitalised runs here), no regular expression.
#
#   def spans(str text) -> tuple[frozenset, str]
#   def find_spans_for_tests(str text, bint phones, bint emails, bint urls) -> list
#       find_spans with the conservation reader's phone pattern (kind K_PHONE = 10)
#   def find_spans_filtered_for_tests(...) -> list: the same through span_init_filtered
#   def phone_end_for_tests(str text, Py_ssize_t i) -> int
#   def nd_digit_mismatches_for_tests() -> list; def tables_for_tests() -> tuple
include "_text.pxi"
include "_findspans.pxi"

from cpython.mem cimport PyMem_Malloc, PyMem_Realloc
from cpython.pycapsule cimport PyCapsule_GetPointer
from cpython.set cimport PySet_Add
from libc.string cimport memcpy


cdef extern from "Python.h":
    object PyUnicode_FromKindAndData(int kind, const void* buffer, Py_ssize_t size)
    int PyUnicode_4BYTE_KIND
    object PyFrozenSet_New(void* iterable)


cdef enum:
    K_PHONE = 10


# Growing buffers: what one text needs, not a bound fixed by its length (a text's
# buffers stay few and small, so its reading stays in the cache).
cdef struct Scratch:
    Py_UCS4* data
    Py_ssize_t cap


cdef Py_UCS4* _room(Scratch* t, Py_ssize_t need) except NULL:
    cdef Py_UCS4* grown
    cdef Py_ssize_t cap
    if need > t.cap:
        cap = max(need, 2 * t.cap, 256)
        grown = <Py_UCS4*>PyMem_Realloc(t.data, cap * sizeof(Py_UCS4))
        if grown == NULL:
            raise MemoryError()
        t.data = grown
        t.cap = cap
    return t.data


cdef inline void _add(object named, object value) except *:
    PySet_Add(named, value)


cdef str _lower(const Py_UCS4* s, Py_ssize_t start, Py_ssize_t end, Scratch* scratch, str text):
    # text[start:end].lower(), natively when ASCII.
    cdef Py_ssize_t k
    cdef unsigned int c
    cdef Py_UCS4* tmp = _room(scratch, end - start)
    for k in range(start, end):
        c = s[k]
        if c >= 128:
            return text[start:end].lower()
        tmp[k - start] = c + 32 if 65 <= c <= 90 else c
    return _str(tmp, end - start)


cdef inline str _str(const Py_UCS4* b, Py_ssize_t length):
    return PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, b, length)


cdef Py_ssize_t _phone_at(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i, int* kind) noexcept nogil:
    kind[0] = K_PHONE
    return phone_end(s, n, i)


# --- phones: conservation._phone ----------------------------------------------------------


cdef str _phone(const Py_UCS4* s, Py_ssize_t start, Py_ssize_t end):
    # "tel:" + phone_key(the \d characters of the match)
    cdef Py_UCS4* buf = <Py_UCS4*>PyMem_Malloc((end - start + 4) * sizeof(Py_UCS4))
    cdef Py_ssize_t d = 0, off = 0, k
    if buf == NULL:
        raise MemoryError()
    try:
        for k in range(start, end):
            if nd_digit(s[k]):
                buf[4 + d] = s[k]
                d += 1
        if d >= 2 and buf[4] == 48 and buf[5] == 48:  # removeprefix("00")
            off = 2
        if d - off == 13 and buf[4 + off] == 56 and buf[5 + off] == 54 and buf[6 + off] == 49:
            off += 2  # +86 mobiles as dialled at home
        buf[off] = 116  # t
        buf[off + 1] = 101  # e
        buf[off + 2] = 108  # l
        buf[off + 3] = 58  # :
        return _str(buf + off, 4 + d - off)
    finally:
        PyMem_Free(buf)


# --- ID-like tokens: conservation._id_like ------------------------------------------------


# redaction._TOKEN_CHARS: ASCII letters, digits, _ and -
cdef inline bint _token_char(Py_UCS4 c) noexcept nogil:
    return ascii_letter(c) or ascii_digit(c) or c == 95 or c == 45


# [A-Za-z_-]
cdef inline bint _token_letter(Py_UCS4 c) noexcept nogil:
    return ascii_letter(c) or c == 95 or c == 45


cdef inline bint _same(const Py_UCS4* w, Py_ssize_t length, const char* word) noexcept nogil:
    cdef Py_ssize_t k = 0
    while k < length:
        if word[k] == 0 or <Py_UCS4>word[k] != w[k]:
            return False
        k += 1
    return word[k] == 0


# The unit endings of conservation._NUMBER_WITH_UNIT.
cdef const char* _UNITS[32]
_UNITS[:] = [
    b"st", b"nd", b"rd", b"th", b"am", b"pm", b"AM", b"PM", b"s", b"m", b"h", b"d", b"w", b"k",
    b"K", b"M", b"x", b"X", b"%", b"min", b"ms", b"kg", b"km", b"cm", b"mm", b"ml", b"GB", b"MB",
    b"KB", b"TB", b"gb", b"mb",
]


cdef bint _number_with_unit(const Py_UCS4* t, Py_ssize_t length) noexcept nogil:
    # _NUMBER_WITH_UNIT.match(token) for an ASCII token without ".": digits, then a unit.
    cdef Py_ssize_t k = 0, u
    while k < length and ascii_digit(t[k]):
        k += 1
    if k == 0 or length - k > 3:
        return False
    for u in range(32):
        if _same(t + k, length - k, _UNITS[u]):
            return True
    return False


cdef Py_UCS4* _id_like(
    Py_UCS4* a, Py_ssize_t n, object named, Py_ssize_t* out_n, const Py_ssize_t* runs,
    Py_ssize_t n_runs, Positions* ups
) except? NULL:
    """The ID-like tokens of a[:n] added to `named`; the text with each blanked to one space
    (a new buffer, *out_n long), or `a` itself when none is found.

    runs[:n_runs]: ascending, every place a run of ASCII digits starts at (others too);
    `ups`, where the capital letters stand, is moved to the new text's places."""
    cdef Py_UCS4* b = NULL
    cdef Py_ssize_t w = 0, copied = 0, pos = 0, i, j, left, right, start, end, k, r
    cdef Py_ssize_t up_read = 0, up_write = 0, shift = 0
    cdef bint letter
    for r in range(n_runs):
        i = runs[r]
        if i < pos or not ascii_digit(a[i]) or (i > 0 and ascii_digit(a[i - 1])):
            continue
        j = i + 1
        while j < n and ascii_digit(a[j]):
            j += 1
        # _TOKEN_DIGITS: a digit run next to a letter, _ or -.
        if not ((i > 0 and _token_letter(a[i - 1])) or (j < n and _token_letter(a[j]))):
            pos = j
            continue
        left = i
        while left > 0 and _token_char(a[left - 1]):
            left -= 1
        right = j
        while right < n and _token_char(a[right]):
            right += 1
        pos = right
        start, end = left, right
        while a[start] == 95 or a[start] == 45:
            start += 1
        while a[end - 1] == 95 or a[end - 1] == 45:
            end -= 1
        letter = False
        for k in range(start, end):
            if ascii_letter(a[k]):
                letter = True
                break
        if not letter or _number_with_unit(a + start, end - start):
            continue
        _add(named, _str(a + start, end - start))
        if b == NULL:
            b = <Py_UCS4*>PyMem_Malloc(n * sizeof(Py_UCS4) + 4)
            if b == NULL:
                raise MemoryError()
        memcpy(b + w, a + copied, (start - copied) * sizeof(Py_UCS4))
        w += start - copied
        b[w] = 32
        w += 1
        copied = end
        # The capitals before the token move back by what was blanked before; its own go.
        while up_read < ups.count and ups.data[up_read] < start:
            ups.data[up_write] = ups.data[up_read] - shift
            up_write += 1
            up_read += 1
        while up_read < ups.count and ups.data[up_read] < end:
            up_read += 1
        shift += end - start - 1
    if b == NULL:
        out_n[0] = n
        return a
    while up_read < ups.count:
        ups.data[up_write] = ups.data[up_read] - shift
        up_write += 1
        up_read += 1
    ups.count = up_write
    memcpy(b + w, a + copied, (n - copied) * sizeof(Py_UCS4))
    out_n[0] = w + n - copied
    return b


# --- quoted spans: conservation._quoted ------------------------------------------------------

cdef Py_UCS4 _OPENERS[6]
cdef Py_UCS4 _CLOSERS[6]
_OPENERS[:] = [0x201C, 0x300C, 0x300E, 0x300A, 34, 39]  # “ 「 『 《 " '
_CLOSERS[:] = [0x201D, 0x300D, 0x300F, 0x300B, 34, 39]  # ” 」 』 》 " '


cdef inline int _opener(Py_UCS4 c) noexcept nogil:
    # Which of _OPENERS c is, or -1.
    if c < 0x201C:
        return 4 if c == 34 else 5 if c == 39 else -1
    if c == 0x201C:
        return 0
    if c == 0x300C:
        return 1
    if c == 0x300E:
        return 2
    if c == 0x300A:
        return 3
    return -1


cdef str _collapsed(const Py_UCS4* s, Py_ssize_t start, Py_ssize_t end, Scratch* scratch):
    # " ".join(s[start:end].split())
    cdef Py_ssize_t w = 0, k
    cdef Py_UCS4* tmp = _room(scratch, end - start)
    cdef bint gap = False
    for k in range(start, end):
        if re_space(s[k]):
            gap = w > 0
        else:
            if gap:
                tmp[w] = 32
                w += 1
                gap = False
            tmp[w] = s[k]
            w += 1
    return _str(tmp, w)


cdef void _quoted(
    const Py_UCS4* s, Py_ssize_t n, object named, Scratch* tmp, const Py_ssize_t* openers,
    Py_ssize_t count
) except *:
    # openers[:count]: where the opening marks stand, in order.
    cdef Py_ssize_t closing[6]
    cdef Py_ssize_t pos = 0, start, close, j
    cdef int q
    cdef Py_UCS4 closer
    for q in range(6):
        closing[q] = -1
    for j in range(count):
        start = openers[j]
        if start < pos:
            continue
        q = _opener(s[start])
        close = closing[q]
        if close <= start:
            closer = _CLOSERS[q]
            close = start + 1
            while close < n and s[close] != closer:
                close += 1
            closing[q] = close
        if start + 1 < close <= start + 201 and close < n:
            pos = close + 1
            # '…' is a quote only when its marks are not apostrophes inside words.
            if s[start] == 39 and (
                (start > 0 and Py_UNICODE_ISALPHA(s[start - 1]))
                or (pos < n and Py_UNICODE_ISALPHA(s[pos]))
            ):
                continue
            _add(named, _collapsed(s, start, pos, tmp))
        else:
            pos = start + 1


# --- capitalised runs ---------------------------------------------------------------------


cdef inline bint _upper(Py_UCS4 c) noexcept nogil:
    return 65 <= c <= 90


cdef inline bint _space_tab(Py_UCS4 c) noexcept nogil:
    return c == 32 or c == 9


# [A-Za-z0-9&'’-]
cdef inline bint _word_char(Py_UCS4 c) noexcept nogil:
    return ascii_letter(c) or ascii_digit(c) or c == 38 or c == 39 or c == 0x2019 or c == 45


cdef Py_ssize_t _word_end(const Py_UCS4* r, Py_ssize_t n, Py_ssize_t p) noexcept nogil:
    # _CAPITALISED_WORD from p (r[p] is A-Z): [A-Z][A-Za-z0-9&'’-]*(?:\.[A-Z][A-Za-z0-9]*)*
    p += 1
    while p < n and _word_char(r[p]):
        p += 1
    while p + 1 < n and r[p] == 46 and _upper(r[p + 1]):
        p += 2
        while p < n and (ascii_letter(r[p]) or ascii_digit(r[p])):
            p += 1
    return p


cdef const char* _CONNECTORS[7]
_CONNECTORS[:] = [b"of", b"the", b"and", b"de", b"von", b"van", b"&"]


cdef Py_ssize_t _run_end(const Py_UCS4* r, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    # _CAPITALISED_RUN from i: WORD (?:[ \t]+(?:(?:of|the|and|de|von|van|&)[ \t]+)?WORD)*+
    cdef Py_ssize_t e = _word_end(r, n, i), p, q, length
    cdef int c
    cdef const char* word
    while e < n and _space_tab(r[e]):
        p = e
        while p < n and _space_tab(r[p]):
            p += 1
        q = -1
        for c in range(7):
            word = _CONNECTORS[c]
            length = 0
            while word[length] != 0 and p + length < n and r[p + length] == <Py_UCS4>word[length]:
                length += 1
            if word[length] == 0 and p + length < n and _space_tab(r[p + length]):
                q = p + length
                break
        if q >= 0:
            while q < n and _space_tab(r[q]):
                q += 1
            if q < n and _upper(r[q]):
                e = _word_end(r, n, q)
                continue
        if p < n and _upper(r[p]):
            e = _word_end(r, n, p)
            continue
        break
    return e


# conservation._OPENING_SKIP and _OPENING_MARKS
cdef inline bint _opening_skip(Py_UCS4 c) noexcept nogil:
    return (
        c == 32 or c == 9 or c == 34 or c == 39 or c == 0x201C or c == 0x2018 or c == 40
        or c == 0xFF08 or c == 0x300C or c == 0x300E or c == 0x300A
    )


cdef inline bint _opening_mark(Py_UCS4 c) noexcept nogil:
    return (
        c == 46 or c == 33 or c == 63 or c == 0x3002 or c == 0xFF01 or c == 0xFF1F
        or c == 58 or c == 0xFF1A or c == 59 or c == 0xFF1B or c == 10
    )


cdef bint _opens_sentence(const Py_UCS4* r, Py_ssize_t start) noexcept nogil:
    cdef Py_ssize_t i = start - 1
    while i >= 0 and _opening_skip(r[i]):
        i -= 1
    return i < 0 or _opening_mark(r[i])


# conservation._OPENING_WORDS
cdef const char* _OPENING_WORDS[46]
_OPENING_WORDS[:] = [
    b"A", b"An", b"The", b"This", b"That", b"These", b"Those", b"Hi", b"Hello", b"Hey", b"Dear",
    b"Thanks", b"Thank", b"Please", b"Sorry", b"Yes", b"No", b"Ok", b"Okay", b"We", b"You",
    b"Your", b"Our", b"My", b"It", b"If", b"When", b"As", b"For", b"In", b"On", b"At", b"To",
    b"From", b"By", b"With", b"And", b"But", b"So", b"Also", b"Unfortunately", b"Good",
    b"Welcome", b"Congratulations", b"Regards", b"Best",
]
cdef int _N_OPENING_WORDS = 46

# conservation._ABBREVIATED_NAMES
cdef const char* _SHORT_NAMES[23]
cdef const char* _FULL_NAMES[23]
_SHORT_NAMES[:] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Sept", b"Oct",
    b"Nov", b"Dec", b"Mon", b"Tue", b"Tues", b"Wed", b"Thu", b"Thur", b"Thurs", b"Fri", b"Sat",
    b"Sun",
]
_FULL_NAMES[:] = [
    b"January", b"February", b"March", b"April", b"May", b"June", b"July", b"August",
    b"September", b"September", b"October", b"November", b"December", b"Monday", b"Tuesday",
    b"Tuesday", b"Wednesday", b"Thursday", b"Thursday", b"Thursday", b"Friday", b"Saturday",
    b"Sunday",
]


# The opening words by their first letter (each starts with one of A-Z), so a run is held
# to the few that share its first letter.
cdef int _OPENING_BY_FIRST[26][12]
cdef int _N_OPENING_BY_FIRST[26]
_N_OPENING_BY_FIRST[:] = [0] * 26
for _k in range(_N_OPENING_WORDS):
    _first = _OPENING_WORDS[_k][0] - 65
    assert 0 <= _first < 26 and _N_OPENING_BY_FIRST[_first] < 12
    _OPENING_BY_FIRST[_first][_N_OPENING_BY_FIRST[_first]] = _k
    _N_OPENING_BY_FIRST[_first] += 1


cdef bint _opening_word(const Py_UCS4* w, Py_ssize_t length) noexcept nogil:
    cdef int k, first
    if length == 0 or not _upper(w[0]):
        return False
    first = <int>w[0] - 65
    for k in range(_N_OPENING_BY_FIRST[first]):
        if _same(w, length, _OPENING_WORDS[_OPENING_BY_FIRST[first][k]]):
            return True
    return False


cdef Py_ssize_t _put_word(const Py_UCS4* w, Py_ssize_t length, Py_UCS4* out) noexcept nogil:
    # The word as _ABBREVIATED_NAMES.get(w.rstrip("."), w) spells it; how many written.
    cdef Py_ssize_t stripped = length, k
    cdef int a
    cdef const char* full
    while stripped > 0 and w[stripped - 1] == 46:
        stripped -= 1
    if 3 <= stripped <= 5:
        for a in range(23):
            if _same(w, stripped, _SHORT_NAMES[a]):
                full = _FULL_NAMES[a]
                k = 0
                while full[k] != 0:
                    out[k] = <Py_UCS4>full[k]
                    k += 1
                return k
    for k in range(length):
        out[k] = w[k]
    return length


cdef void _capitalised(
    const Py_UCS4* r, Py_ssize_t n, object named, Scratch* scratch, const Py_ssize_t* ups,
    Py_ssize_t n_ups
) except *:
    # ups[:n_ups]: where the capital letters (A-Z) of r stand, ascending.
    cdef Py_UCS4* tmp
    cdef Py_ssize_t i = 0, start, end, k, first_end, w, word_start, u
    cdef bint single, lower
    for u in range(n_ups):
        if ups[u] < i:
            continue
        start = ups[u]
        i = _run_end(r, n, start)
        if start > 0 and (
            (ascii_letter(r[start - 1]) or ascii_digit(r[start - 1])) if r[start - 1] < 128
            else Py_UNICODE_ISALNUM(r[start - 1])
        ):
            continue  # inside a word ("iPhone")
        end = i
        while end > start and (r[end - 1] == 46 or r[end - 1] == 45 or r[end - 1] == 38):
            end -= 1
        if end == start:
            continue
        first_end = start
        while first_end < end and not _space_tab(r[first_end]):
            first_end += 1
        single = first_end == end
        if single and end - start == 1 and r[start] == 73:
            continue  # "I"
        if _opens_sentence(r, start):
            if _opening_word(r + start, first_end - start):
                # "Hi John" → "John": the greeting is capitalised by grammar.
                start = first_end
                while start < end and _space_tab(r[start]):
                    start += 1
                if start == end:
                    continue
            elif single:
                lower = False
                for k in range(start, end):
                    if 97 <= r[k] <= 122:
                        lower = True
                        break
                if lower:
                    continue  # a single capitalised word opening a sentence
        # The words, one space apart, each as _ABBREVIATED_NAMES spells it (at most 3
        # times as long: Wed → Wednesday).
        tmp = _room(scratch, 3 * (end - start) + 16)
        w = 0
        k = start
        while k < end:
            word_start = k
            while k < end and not _space_tab(r[k]):
                k += 1
            if w:
                tmp[w] = 32
                w += 1
            w += _put_word(r + word_start, k - word_start, tmp + w)
            while k < end and _space_tab(r[k]):
                k += 1
        _add(named, _str(tmp, w))


# What one pass over the text looks for: which readers it needs.
cdef enum:
    _DIGIT = 1
    _AT = 2
    _COLON_W = 4  # ":" or "w": "://" or "www." may follow
    _QUOTE = 8  # an opening quote mark
    _UPPER = 16
    _PHONE_START = 32  # "+" or "("

cdef unsigned char _ASCII_CLASS[128]
_ASCII_CLASS[:] = [0] * 128
for _c in range(48, 58):
    _ASCII_CLASS[_c] = _DIGIT
for _c in range(65, 91):
    _ASCII_CLASS[_c] = _UPPER
_ASCII_CLASS[64] = _AT
_ASCII_CLASS[58] = _COLON_W
_ASCII_CLASS[119] = _COLON_W
_ASCII_CLASS[34] = _QUOTE
_ASCII_CLASS[39] = _QUOTE
_ASCII_CLASS[43] = _PHONE_START
_ASCII_CLASS[40] = _PHONE_START


# --- spans --------------------------------------------------------------------------------

from controlplane.compare import _counts, _numbers

cdef counts_of_t _counts_of = <counts_of_t>PyCapsule_GetPointer(_counts.counts_of_capsule, COUNTS_OF)
cdef numbers_of_t _numbers_of = <numbers_of_t>PyCapsule_GetPointer(
    _numbers.numbers_of_capsule, NUMBERS_OF
)


def spans(str text):
    """(conservation.spans(text).named, conservation.spans(text).rest)."""
    cdef Py_UCS4* s = code_points(text)
    cdef Py_UCS4* rest = NULL
    cdef Py_ssize_t rest_n
    try:
        named = _named(text, s, len(text), &rest, &rest_n)
        return named, text if rest == s else _str(rest, rest_n)
    finally:
        if rest != s:
            PyMem_Free(rest)
        PyMem_Free(s)


def read(str text):
    """(sentences, length, negations, numbers, named spans): conservation.read_python's
    Reading of the text, in one call on one copy of its code points (the counts and number
    readers of _counts and _numbers reached by address)."""
    cdef Py_ssize_t n = len(text)
    cdef Py_UCS4* s = code_points(text)
    cdef Py_UCS4* rest = NULL
    cdef Py_ssize_t rest_n
    try:
        named = _named(text, s, n, &rest, &rest_n)
        sentences, length, negations = _counts_of(s, n)
        # Last: it blanks the rest in place, which may be the text's own code points. The
        # rest of an ASCII text is ASCII.
        return sentences, length, negations, _numbers_of(rest, rest_n, text.isascii()), named
    finally:
        if rest != s:
            PyMem_Free(rest)
        PyMem_Free(s)


cdef object _named(str text, Py_UCS4* s, Py_ssize_t n, Py_UCS4** rest, Py_ssize_t* rest_n):
    """conservation.spans(text).named, of the text's code points s[:n]; *rest is set to the
    rest's code points, *rest_n long and followed by a 0: s itself when nothing is blanked,
    else a new buffer, which the caller frees (left NULL when this raises)."""
    cdef Py_ssize_t i, an, bn, k, w, copied, start, end
    cdef Py_UCS4* a = s
    cdef Py_UCS4* b = s
    cdef Scratch tmp
    cdef Positions starts, openers, ats, ups, runs
    cdef Py_ssize_t shift = 0, run_read = 0, up_read = 0, up_write = 0
    cdef bint email = False, url = False, digits = False
    cdef unsigned char bits, seen = 0
    cdef Py_UCS4 c
    cdef int kind
    cdef SpanFinder finder
    # Filled while no other code holds it (PySet_Add may fill a brand new frozenset).
    cdef object named = PyFrozenSet_New(NULL)
    tmp.data = NULL
    tmp.cap = 0
    starts.data = openers.data = ats.data = ups.data = runs.data = NULL
    starts.count = starts.cap = openers.count = openers.cap = ats.count = ats.cap = 0
    ups.count = ups.cap = runs.count = runs.cap = 0
    try:
        # One pass: which readers the text needs, where a phone number may start (a
        # digit no ASCII digit comes before, "+", "("), where the quote marks stand.
        for i in range(n):
            c = s[i]
            if c < 128:
                bits = _ASCII_CLASS[c]
                if bits:
                    seen |= bits
                    if bits & _DIGIT:
                        if i == 0 or not ascii_digit(s[i - 1]):
                            _push(&starts, i)
                    elif bits & _PHONE_START:
                        _push(&starts, i)
                    elif bits & _QUOTE:
                        _push(&openers, i)
                    elif bits & _AT:
                        _push(&ats, i)
                    elif bits & _UPPER:
                        _push(&ups, i)
                    elif bits & _COLON_W:
                        if c == 58:
                            if i + 2 < n and s[i + 1] == 47 and s[i + 2] == 47:
                                url = True
                        elif i + 3 < n and s[i + 1] == 119 and s[i + 2] == 119 and s[i + 3] == 46:
                            url = True
            elif 0x3010 <= c < 0xA620:
                continue  # CJK (no quote mark, no digit): most characters of Chinese text
            elif c == 0x201C or c == 0x300A or c == 0x300C or c == 0x300E:
                _push(&openers, i)
            elif nd_digit(c):
                _push(&starts, i)
        digits = (seen & _DIGIT) != 0
        email = (seen & _AT) != 0
        an = n
        if email or url or digits:
            span_init_hinted(
                &finder, s, n, _phone_at if digits else <match_at_t>NULL, email, url,
                starts.data, starts.count, ats.data, ats.count,
            )
            w = 0
            copied = 0
            while span_next(&finder, &kind, &start, &end):
                if a == s:
                    a = <Py_UCS4*>PyMem_Malloc(n * sizeof(Py_UCS4) + 4)
                    if a == NULL:
                        raise MemoryError()
                if kind == K_EMAIL:
                    _add(named, _lower(s, start, end, &tmp, text))
                elif kind == K_PHONE:
                    _add(named, _phone(s, start, end))
                else:
                    _add(named, _str(s + start, end - start))
                memcpy(a + w, s + copied, (start - copied) * sizeof(Py_UCS4))
                w += start - copied
                a[w] = 32
                w += 1
                copied = end
                # Where digit runs may start and capitals stand, moved to the rest's
                # places: back by what was blanked before, dropped inside the span.
                while run_read < starts.count and starts.data[run_read] < start:
                    _push(&runs, starts.data[run_read] - shift)
                    run_read += 1
                while run_read < starts.count and starts.data[run_read] < end:
                    run_read += 1
                while up_read < ups.count and ups.data[up_read] < start:
                    ups.data[up_write] = ups.data[up_read] - shift
                    up_write += 1
                    up_read += 1
                while up_read < ups.count and ups.data[up_read] < end:
                    up_read += 1
                shift += end - start - 1
                if end < n and ascii_digit(s[end]):
                    _push(&runs, end - shift)  # a run may start after the blank
            if a != s:
                memcpy(a + w, s + copied, (n - copied) * sizeof(Py_UCS4))
                an = w + n - copied
                while run_read < starts.count:
                    _push(&runs, starts.data[run_read] - shift)
                    run_read += 1
                while up_read < ups.count:
                    ups.data[up_write] = ups.data[up_read] - shift
                    up_write += 1
                    up_read += 1
                ups.count = up_write
            b = a
            bn = an
            if digits:
                if a == s:
                    b = _id_like(a, an, named, &bn, starts.data, starts.count, &ups)
                else:
                    b = _id_like(a, an, named, &bn, runs.data, runs.count, &ups)
        else:
            bn = n
        if openers.count:
            _quoted(s, n, named, &tmp, openers.data, openers.count)
        if ups.count:
            _capitalised(b, bn, named, &tmp, ups.data, ups.count)
        if b != s:
            b[bn] = 0  # each new buffer has room for it
        if a != s and a != b:
            PyMem_Free(a)
        rest[0] = b
        rest_n[0] = bn
        a = b = s  # handed over (a freed)
        return named
    finally:
        if b != a and b != s:
            PyMem_Free(b)
        if a != s:
            PyMem_Free(a)
        PyMem_Free(tmp.data)
        PyMem_Free(starts.data)
        PyMem_Free(openers.data)
        PyMem_Free(ats.data)
        PyMem_Free(ups.data)
        PyMem_Free(runs.data)


def nd_digit_mismatches_for_tests():
    """The code points where nd_digit and re_digit disagree (none)."""
    cdef Py_UCS4 c
    return [c for c in range(0x110000) if nd_digit(c) != re_digit(c)]


def tables_for_tests():
    """The word tables spelt here, to be checked against conservation's."""
    return (
        frozenset(_OPENING_WORDS[k].decode() for k in range(_N_OPENING_WORDS)),
        {_SHORT_NAMES[k].decode(): _FULL_NAMES[k].decode() for k in range(23)},
        [_UNITS[k].decode() for k in range(32)],
    )


def phone_end_for_tests(str text, Py_ssize_t i):
    """phone_end(text, i): the end of redaction.PHONE matched at i, or -1."""
    cdef Py_UCS4* s = code_points(text)
    try:
        return phone_end(s, len(text), i)
    finally:
        PyMem_Free(s)


def find_spans_filtered_for_tests(str text, bint phones, bint emails, bint urls):
    """find_spans_for_tests through span_init_filtered (PHONE_FIRST, PHONE_NON_ASCII)."""
    cdef match_at_t other = _phone_at if phones else <match_at_t>NULL
    cdef Py_UCS4* s = code_points(text)
    cdef SpanFinder finder
    cdef int kind
    cdef Py_ssize_t start, end
    cdef list out = []
    try:
        span_init_filtered(&finder, s, len(text), other, emails, urls, PHONE_FIRST, PHONE_NON_ASCII)
        while span_next(&finder, &kind, &start, &end):
            out.append((kind, start, end))
        return out
    finally:
        PyMem_Free(s)


def find_spans_for_tests(str text, bint phones, bint emails, bint urls):
    """find_spans with conservation's phone pattern (K_PHONE) as the other pattern."""
    cdef match_at_t other = _phone_at if phones else <match_at_t>NULL
    cdef Py_UCS4* s = code_points(text)
    try:
        return find_spans(s, len(text), other, emails, urls)
    finally:
        PyMem_Free(s)
