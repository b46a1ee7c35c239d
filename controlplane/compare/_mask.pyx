# cython: language_level=3
"""The masker's reading of one text (redaction.Masker._mask), compiled.

`mask(text, placeholders, counts)` returns what `Masker._mask(text)` returns for a Masker
whose `_placeholders` and `_counts` are those dicts, and mutates them the same way (the
same keys, numbered in the same order); `mask_many(texts, placeholders, counts, max_chars)`
masks a list of texts one after another, as many calls of `mask` would. Every pattern of the Python masker is matched by a
small hand-written matcher at each position of the text's view (one scan, each match of
bounded length), so the time is linear in the text's length by construction.
"""

include "_text.pxi"
include "_findspans.pxi"

from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.string cimport memcpy


cdef extern from "Python.h":
    object PyUnicode_FromKindAndData(int kind, const void* buffer, Py_ssize_t size)
    int PyUnicode_4BYTE_KIND
    Py_UCS4 PyUnicode_READ_CHAR(object text, Py_ssize_t index)
    bint PyUnicode_IS_ASCII(object text)
    void* PyUnicode_DATA(object text)


# The kinds of the first pass's matches (find_spans' `other`: kinds >= 10).
cdef enum:
    K_KEEP = 10
    K_IP = 11
    K_IP6 = 12
    K_IDCARD = 13
    K_CARD = 14
    K_SSN = 15
    K_PHONE = 16

# The placeholder types, in redaction.TYPES' order (KEEP's alternation order), and each
# one's index there.
_NAMES = ("EMAIL", "IP", "IDCARD", "CARD", "PHONE", "ID", "NUM")
cdef enum:
    P_EMAIL = 0
    P_IP = 1
    P_IDCARD = 2
    P_CARD = 3
    P_PHONE = 4
    P_ID = 5
    P_NUM = 6


cdef inline bint digit(Py_UCS4 c) noexcept nogil:
    # `\d` read on the view: every decimal digit there is ASCII.
    return 48 <= c <= 57


cdef inline bint hexdigit(Py_UCS4 c) noexcept nogil:
    return (48 <= c <= 57) or (65 <= c <= 70) or (97 <= c <= 102)


cdef inline bint ascii_alnum(Py_UCS4 c) noexcept nogil:
    return (48 <= c <= 57) or (65 <= c <= 90) or (97 <= c <= 122)


# The groups' joiners: [ ./\u200b-\u200d\u2060-]
cdef inline bint joiner(Py_UCS4 c) noexcept nogil:
    return (c == 32 or c == 46 or c == 47 or c == 45 or (0x200B <= c <= 0x200D)
            or c == 0x2060)


# _TOKEN_LETTERS: ASCII letters, "_" and "-".
cdef inline bint token_letter(Py_UCS4 c) noexcept nogil:
    return ascii_letter(c) or c == 95 or c == 45


# _MASK_TOKEN_CHARS read on the view (its full-width digits are ASCII there).
cdef inline bint token_char(Py_UCS4 c) noexcept nogil:
    return ascii_alnum(c) or c == 95 or c == 45


cdef inline Py_ssize_t run_end(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    """The end of the ASCII digit run starting at i (i when none)."""
    while i < n and digit(s[i]):
        i += 1
    return i


# --- the placeholders' shape ------------------------------------------------------------

cdef Py_ssize_t name_end(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i, int* most) noexcept nogil:
    """After a placeholder's type name starting at i and its "_" (most: its digits' bound),
    or -1. The names share no prefix followed by "_", so one at most fits."""
    cdef const char* names[8]
    cdef int bounds[8]
    names[0] = b"EMAIL"; names[1] = b"IP"; names[2] = b"IDCARD"; names[3] = b"CARD"
    names[4] = b"PHONE"; names[5] = b"ID"; names[6] = b"NUM"; names[7] = b"TRUNCATED"
    cdef int k, j
    for k in range(8):
        j = 0
        while names[k][j] != 0 and i + j < n and s[i + j] == <Py_UCS4>names[k][j]:
            j += 1
        if names[k][j] == 0 and i + j < n and s[i + j] == 95:
            most[0] = 9 if k == 7 else 6
            return i + j + 1
    return -1


cdef Py_ssize_t keep_end(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    """_KEEP at i ("<" at s[i]): the end, or -1."""
    cdef int most = 0
    cdef Py_ssize_t j = name_end(s, n, i + 1, &most)
    if j < 0:
        return -1
    cdef Py_ssize_t e = run_end(s, n, j)
    if e == j or e - j > most or e >= n or s[e] != 62:
        return -1
    return e + 1


# --- the first pass's branches, each at one start -----------------------------------------

cdef Py_ssize_t ipv4_end(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    # \d(?<![\d.]\d)\d{0,2}(?:\.\d{1,3}){3}(?![\d.])
    if i > 0 and (digit(s[i - 1]) or s[i - 1] == 46):
        return -1
    cdef Py_ssize_t e = run_end(s, n, i)
    if e - i > 3:
        return -1
    cdef int k
    cdef Py_ssize_t j
    for k in range(3):
        if e >= n or s[e] != 46:
            return -1
        j = run_end(s, n, e + 1)
        if j == e + 1 or j - e - 1 > 3:
            return -1
        e = j
    if e < n and (digit(s[e]) or s[e] == 46):
        return -1
    return e


cdef inline Py_ssize_t hex_end(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    while i < n and hexdigit(s[i]):
        i += 1
    return i


cdef Py_ssize_t ipv6_end(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    # [0-9A-Fa-f](?<![:\w][0-9A-Fa-f])[0-9A-Fa-f]{0,3}(?::[0-9A-Fa-f]{1,4}){3,7}(?![:\w])
    # Each group must be its whole hex run (a shorter one leaves a \w next); the groups are
    # taken greedily, and fewer leave a ":" next: one try decides.
    if i > 0 and (s[i - 1] == 58 or re_word(s[i - 1])):
        return -1
    cdef Py_ssize_t e = hex_end(s, n, i)
    if e - i > 4:
        return -1
    cdef int groups = 0
    cdef Py_ssize_t j
    while groups < 7 and e < n and s[e] == 58:
        j = hex_end(s, n, e + 1)
        if j == e + 1 or j - e - 1 > 4:
            break
        e = j
        groups += 1
    if groups < 3 or (e < n and (s[e] == 58 or re_word(s[e]))):
        return -1
    return e


cdef Py_ssize_t idcard_end(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    # \d(?<![0-9A-Za-z]\d)\d{16}[\dXx](?![0-9A-Za-z])
    if i > 0 and ascii_alnum(s[i - 1]):
        return -1
    if i + 18 > n:
        return -1
    cdef Py_ssize_t j
    for j in range(i, i + 17):
        if not digit(s[j]):
            return -1
    cdef Py_UCS4 c = s[i + 17]
    if not (digit(c) or c == 88 or c == 120):
        return -1
    if i + 18 < n and ascii_alnum(s[i + 18]):
        return -1
    return i + 18


cdef Py_ssize_t card_end(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    # \d(?<!\d\d)\d{3}[j](?:\d{4}[j]){2}\d{1,7}(?!\d) | \d(?<!\d\d)\d{12,18}(?!\d)
    if i > 0 and digit(s[i - 1]):
        return -1
    cdef Py_ssize_t e = run_end(s, n, i)
    cdef Py_ssize_t j
    cdef int k
    if e - i == 4:
        j = e
        for k in range(2):
            if j >= n or not joiner(s[j]) or run_end(s, n, j + 1) - j - 1 < 4:
                break
            j += 5
        else:
            if j < n and joiner(s[j]):
                e = run_end(s, n, j + 1)
                if 1 <= e - j - 1 <= 7:
                    return e
        return -1  # a run of 4 is too short for the second branch
    if 13 <= e - i <= 19:
        return e
    return -1


cdef Py_ssize_t ssn_end(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    # \d(?<![\d-]\d)\d{2}-\d{2}-\d{4}(?![\d-])
    if i > 0 and (digit(s[i - 1]) or s[i - 1] == 45):
        return -1
    if i + 11 > n:
        return -1
    cdef Py_ssize_t j
    for j in range(i, i + 11):
        if j == i + 3 or j == i + 6:
            if s[j] != 45:
                return -1
        elif not digit(s[j]):
            return -1
    if i + 11 < n and (digit(s[i + 11]) or s[i + 11] == 45):
        return -1
    return i + 11


cdef inline Py_ssize_t first_at(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i, int* kind,
                                bint ipv4, bint ipv6) noexcept nogil:
    """The first pass's match at i (redaction._pattern's alternation, in its order)."""
    cdef Py_UCS4 c = s[i]
    cdef Py_ssize_t e
    if c == 60:
        e = keep_end(s, n, i)
        if e >= 0:
            kind[0] = K_KEEP
        return e
    if digit(c):
        if i > 0 and digit(s[i - 1]):
            # Every branch starting with a digit reads "not after a digit" (KEEP and IPv6
            # too: a digit is \w); so do the phones' ("0(?<!\d0)", "1(?<!\d1)", …).
            return -1
        if ipv4:
            e = ipv4_end(s, n, i)
            if e >= 0:
                kind[0] = K_IP
                return e
        if ipv6:
            e = ipv6_end(s, n, i)
            if e >= 0:
                kind[0] = K_IP6
                return e
        e = idcard_end(s, n, i)
        if e >= 0:
            kind[0] = K_IDCARD
            return e
        e = card_end(s, n, i)
        if e >= 0:
            kind[0] = K_CARD
            return e
        e = ssn_end(s, n, i)
        if e >= 0:
            kind[0] = K_SSN
            return e
    elif ipv6 and hexdigit(c):
        e = ipv6_end(s, n, i)
        if e >= 0:
            kind[0] = K_IP6
        return e  # no phone starts with a letter
    elif c != 43 and c != 40:  # a phone starts with a digit, "+" or "("
        return -1
    e = phone_end(s, n, i)
    if e >= 0:
        kind[0] = K_PHONE
    return e


cdef Py_ssize_t first_00(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i, int* kind) noexcept nogil:
    return first_at(s, n, i, kind, False, False)


cdef Py_ssize_t first_10(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i, int* kind) noexcept nogil:
    return first_at(s, n, i, kind, True, False)


cdef Py_ssize_t first_01(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i, int* kind) noexcept nogil:
    return first_at(s, n, i, kind, False, True)


cdef Py_ssize_t first_11(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i, int* kind) noexcept nogil:
    return first_at(s, n, i, kind, True, True)


# --- placeholders ----------------------------------------------------------------------

cdef inline str chars(const Py_UCS4* s, Py_ssize_t start, Py_ssize_t end):
    return PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, s + start, end - start)


cdef str digits_of(const Py_UCS4* s, Py_ssize_t start, Py_ssize_t end):
    """re.sub(r"\\D", "", view[start:end]): the view's digits are ASCII."""
    cdef Py_UCS4 buf[64]
    cdef Py_ssize_t k = 0, j
    for j in range(start, end):
        if digit(s[j]) and k < 64:
            buf[k] = s[j]
            k += 1
    if end - start > 64:  # never for the first pass's short matches; kept exact anyway
        return "".join([chr(s[j]) for j in range(start, end) if digit(s[j])])
    return PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, buf, k)


cdef str without_zero_width(const Py_UCS4* s, Py_ssize_t start, Py_ssize_t end):
    """view[start:end] without [\u200b-\u200d\u2060] (redaction._ZERO_WIDTH)."""
    cdef Py_UCS4* buf = <Py_UCS4*>PyMem_Malloc((end - start + 1) * sizeof(Py_UCS4))
    if buf == NULL:
        raise MemoryError()
    cdef Py_ssize_t k = 0, j
    try:
        for j in range(start, end):
            if not ((0x200B <= s[j] <= 0x200D) or s[j] == 0x2060):
                buf[k] = s[j]
                k += 1
        return PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, buf, k)
    finally:
        PyMem_Free(buf)


# "<KIND_n>" spelt once per process for the first numbers of each type (a result's secrets
# are numbered from 1 in every Masker, so the same few strings are made over and over),
# per type (_NAMES' order) a list: the spelling of n at n - 1.
cdef list _SPELT = [[] for _ in _NAMES]
cdef Py_ssize_t _SPELT_MAX = 1000


cdef str placeholder(dict placeholders, dict counts, int type_index, str key):
    cdef str kind = <str>_NAMES[type_index]
    cdef tuple pair = (kind, key)
    cdef list spelt
    cdef Py_ssize_t count
    found = placeholders.get(pair)
    if found is None:
        count = counts.get(kind, 0) + 1
        counts[kind] = count
        spelt = <list>_SPELT[type_index]
        if count <= len(spelt):
            found = spelt[count - 1]
        else:
            found = f"<{kind}_{count}>"
            if count == len(spelt) + 1 and count <= _SPELT_MAX:
                spelt.append(found)
        placeholders[pair] = found
    return found  # (type-checked: a str)


cdef bint luhn(const Py_UCS4* s, Py_ssize_t start, Py_ssize_t end) noexcept nogil:
    cdef int total = 0, d, i = 0
    cdef Py_ssize_t j = end - 1
    while j >= start:
        d = <int>s[j] - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
        i += 1
        j -= 1
    return total % 10 == 0


cdef object replace(dict placeholders, dict counts, int kind, const Py_UCS4* v, Py_ssize_t n,
                    Py_ssize_t start, Py_ssize_t end):
    """Masker._replace on the view: the placeholder, or None."""
    cdef Py_ssize_t j
    cdef str key
    cdef bint plain
    cdef int octet
    if kind == K_KEEP:
        return None
    if kind != K_EMAIL and (
        (start > 0 and token_letter(v[start - 1])) or (end < n and token_letter(v[end]))
    ):
        return None
    if kind == K_IP:
        octet = 0
        for j in range(start, end + 1):
            if j == end or v[j] == 46:
                if octet > 255:
                    return None
                octet = 0
            else:
                octet = octet * 10 + <int>v[j] - 48
        return placeholder(placeholders, counts, P_IP, chars(v, start, end))
    if kind == K_IP6:
        return placeholder(placeholders, counts, P_IP, chars(v, start, end))
    if kind == K_SSN:
        return placeholder(placeholders, counts, P_NUM, digits_of(v, start, end))
    if kind == K_CARD:
        key = digits_of(v, start, end)
        plain = True
        for j in range(start, end):
            if not digit(v[j]):
                plain = False
                break
        if plain and not luhn(v, start, end):
            return placeholder(placeholders, counts, P_NUM, key)
        return placeholder(placeholders, counts, P_CARD, key)
    if kind == K_IDCARD:
        return placeholder(placeholders, counts, P_IDCARD, digits_of(v, start, end))
    if kind == K_PHONE:
        key = digits_of(v, start, end)
        # phone_key: without the 00 prefix, +86 mobiles as dialled at home.
        if key.startswith("00"):
            key = key[2:]
        if len(key) == 13 and key.startswith("861"):
            key = key[2:]
        return placeholder(placeholders, counts, P_PHONE, key)
    if kind == K_EMAIL:
        # Without its zero-width characters, lower case.
        key = without_zero_width(v, start, end).lower()
        return placeholder(placeholders, counts, P_EMAIL, key)
    return None


# --- the output ------------------------------------------------------------------------

cdef struct Out:
    Py_UCS4* buf
    Py_ssize_t len
    Py_ssize_t cap
    bint changed  # a placeholder was put


cdef int reserve(Out* o, Py_ssize_t more) except -1:
    cdef Py_ssize_t cap
    cdef Py_UCS4* buf
    if o.len + more <= o.cap:
        return 0
    cap = max(2 * o.cap, o.len + more + 64)
    buf = <Py_UCS4*>PyMem_Realloc(o.buf, cap * sizeof(Py_UCS4))
    if buf == NULL:
        raise MemoryError()
    o.buf = buf
    o.cap = cap
    return 0


cdef int put(Out* o, const Py_UCS4* s, Py_ssize_t start, Py_ssize_t end) except -1:
    """s[start:end] appended."""
    if end <= start:
        return 0
    reserve(o, end - start)
    memcpy(o.buf + o.len, s + start, (end - start) * sizeof(Py_UCS4))
    o.len += end - start
    return 0


cdef int put_str(Out* o, str text) except -1:
    """A placeholder appended."""
    cdef Py_ssize_t k, n = len(text)
    cdef const unsigned char* ascii
    o.changed = True
    reserve(o, n)
    if PyUnicode_IS_ASCII(text):  # every placeholder: its characters, as they are stored
        ascii = <const unsigned char*>PyUnicode_DATA(text)
        for k in range(n):
            o.buf[o.len + k] = ascii[k]
    else:
        for k in range(n):
            o.buf[o.len + k] = PyUnicode_READ_CHAR(text, k)
    o.len += n
    return 0


# --- the token pass ----------------------------------------------------------------------

cdef bint is_placeholder(const Py_UCS4* t, Py_ssize_t first, Py_ssize_t last) noexcept nogil:
    """_IS_PLACEHOLDER.fullmatch of text[first:last], read on the text (ASCII digits)."""
    if t[first] != 60 or t[last - 1] != 62:
        return False
    cdef int most = 0
    cdef Py_ssize_t j = name_end(t, last - 1, first + 1, &most)
    if j < 0:
        return False
    cdef Py_ssize_t e = j
    while e < last - 1 and ascii_digit(t[e]):
        e += 1
    return e == last - 1 and 1 <= e - j <= most


cdef inline Py_ssize_t next_run(const Py_UCS4* v, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t j,
                                const Positions* starts, Py_ssize_t* cursor) noexcept nogil:
    """Where the first digit run of v[lo:hi] starting at j or later starts, or -1. Past lo
    it is one of `starts` (a digit after no digit in the view); at lo a digit starts one
    (the piece begins there). `cursor` only moves forward, as the pieces do."""
    cdef Py_ssize_t k
    if j == lo and lo < hi and digit(v[lo]):
        return lo
    while cursor[0] < starts.count:
        k = starts.data[cursor[0]]
        if k >= hi:
            return -1
        if k >= j and digit(v[k]):
            return k
        cursor[0] += 1
    return -1


cdef int tokens(Out* o, const Py_UCS4* t, const Py_UCS4* v, Py_ssize_t lo, Py_ssize_t hi,
                dict placeholders, dict counts, const Positions* starts,
                Py_ssize_t* cursor) except -1:
    """Masker._tokens on text[lo:hi] (its view v[lo:hi]), appended to the output; `starts`
    holds where a digit after no digit stands in the view (and more), read from `cursor`."""
    cdef Py_ssize_t copied = lo, pos = lo, j, e, start, end, left, right, k, letters, digits
    cdef bint found
    while True:
        # _TOKEN_DIGIT_RUN.search(view, pos): a whole digit run, long or in a token.
        found = False
        j = next_run(v, lo, hi, pos, starts, cursor)
        while j >= 0:
            e = j + 1
            while e < hi and digit(v[e]):
                e += 1
            if (e - j >= 6 or (j > lo and token_letter(v[j - 1]))
                    or (e < hi and token_letter(v[e]))):
                found = True
                break
            j = next_run(v, lo, hi, e, starts, cursor)
        if not found:
            break
        start, end = j, e
        left, right = start, end
        while left > lo and token_char(v[left - 1]):
            left -= 1
        while right < hi and token_char(v[right]):
            right += 1
        pos = right
        if right - left < 4:
            continue
        if left > lo and right < hi and is_placeholder(t, left - 1, right + 1):
            continue
        while v[left] == 95 or v[left] == 45:
            left += 1
        while v[right - 1] == 95 or v[right - 1] == 45:
            right -= 1
        if right - left >= 4:
            letters = digits = 0
            for k in range(left, right):
                if ascii_letter(v[k]):
                    letters += 1
                elif digit(v[k]):
                    digits += 1
            if letters and digits >= 2:
                put(o, t, copied, left)
                put_str(o, placeholder(placeholders, counts, P_ID, chars(v, left, right)))
                copied = right
                continue
        # _LONG_DIGIT_RUN.finditer(view, start, pos)
        k = start
        while k < pos:
            if digit(v[k]) and (k == lo or not digit(v[k - 1])):
                e = k + 1
                while e < pos and digit(v[e]):
                    e += 1
                if e - k >= 6:
                    put(o, t, copied, k)
                    put_str(o, placeholder(placeholders, counts, P_NUM, chars(v, k, e)))
                    copied = e
                k = e
            else:
                k += 1
    put(o, t, copied, hi)
    return 0


cdef inline bint _view_mark(Py_UCS4 c, Py_UCS4 before, Positions* starts, Positions* ats,
                            Py_ssize_t i, Py_ssize_t* colons, bint* dot) except -1:
    """Notes what the view's character c (below "A") at i is for the first pass: True for a
    digit. `before` is the view's character before it (0 at the start)."""
    if 48 <= c <= 57:
        if not (48 <= before <= 57):
            _push(starts, i)
        return True
    if c == 60 or c == 43 or c == 40:  # < + (
        _push(starts, i)
    elif c == 64:
        _push(ats, i)
    elif c == 46:
        dot[0] = True
    elif c == 58:
        colons[0] += 1
    return False


# --- the masker --------------------------------------------------------------------------

def mask(str text, dict placeholders, dict counts):
    """Masker._mask(text) for a Masker holding these placeholders and counts."""
    return mask_one(text, placeholders, counts)


def mask_many(list texts, dict placeholders, dict counts, Py_ssize_t max_chars):
    """[mask(text, placeholders, counts) for text in texts], in one call (a diff's lists
    hold dozens of short strings, each of which would otherwise cost a call from Python);
    None, with nothing masked, unless every item is a string of at most max_chars."""
    cdef Py_ssize_t k, n = len(texts)
    cdef list out
    cdef object text
    for k in range(n):
        text = texts[k]
        if not isinstance(text, str) or len(text) > max_chars:
            return None
    out = [None] * n
    for k in range(n):
        text = texts[k]
        if type(text) is not str:
            text = str.__str__(text)  # a str subclass: its characters, as Masker._mask reads them
        out[k] = mask_one(<str>text, placeholders, counts)
    return out


cdef object mask_one(str text, dict placeholders, dict counts):
    cdef Py_ssize_t n = len(text), i, start, end, copied, k, count = 0, size = 0
    cdef Py_UCS4* t = code_points(text)
    cdef Py_UCS4* v = NULL
    cdef Py_ssize_t* spans = NULL  # the replaced spans' (start, end)
    cdef Py_ssize_t* grown
    cdef Py_UCS4 c, before = 0
    cdef bint any_digit = False, at = False, dot = False, wide = False
    cdef Py_ssize_t colons = 0, cursor = 0
    # Where the first pass's other patterns may start in the view ("<", "+", "(", a digit
    # after no digit), and where the "@"s stand: its finders are asked only there.
    cdef Positions starts, ats
    cdef int kind
    cdef list replacements
    cdef SpanFinder f
    cdef match_at_t first
    cdef Out o
    o.buf = NULL
    o.len = 0
    o.cap = 0
    o.changed = False
    starts.data = ats.data = NULL
    starts.count = starts.cap = ats.count = ats.cap = 0
    try:
        # The view (redaction._view), one character for one: the text's own buffer when
        # it is ASCII.
        i = 0
        while i < n:
            c = t[i]
            if c >= 128:
                wide = True
                break
            if c < 65 and _view_mark(c, before, &starts, &ats, i, &colons, &dot):
                any_digit = True
            before = c
            i += 1
        if wide:
            v = <Py_UCS4*>PyMem_Malloc((n + 1) * sizeof(Py_UCS4))
            if v == NULL:
                raise MemoryError()
            memcpy(v, t, i * sizeof(Py_UCS4))
            while i < n:
                c = t[i]
                if 0x3010 <= c < 0xA620:
                    # A run of CJK (most of Chinese text): the view reads it as it is.
                    k = i + 1
                    while k < n and 0x3010 <= t[k] < 0xA620:
                        k += 1
                    memcpy(v + i, t + i, (k - i) * sizeof(Py_UCS4))
                    before = t[k - 1]
                    i = k
                    continue
                if c >= 128:
                    if nd_digit(c):
                        c = 48 + Py_UNICODE_TODECIMAL(c)
                    elif c == 0xA0 or c == 0x2007 or c == 0x2009 or c == 0x202F:
                        c = 32
                    elif c == 0xFF20:
                        c = 64
                if c < 65 and _view_mark(c, before, &starts, &ats, i, &colons, &dot):
                    any_digit = True
                v[i] = c
                before = c
                i += 1
        else:
            v = t
        at = ats.count > 0
        if not any_digit and not at:
            return text
        if dot:
            first = first_11 if colons >= 3 else first_10
        else:
            first = first_01 if colons >= 3 else first_00
        if colons >= 3:
            # Hex letters start an IPv6 address too: asked at every "<+(", digit and letter.
            span_init_filtered(&f, v, n, first, at, False, b"<+(0123456789abcdefABCDEF",
                               NON_ASCII_NEVER)
        else:
            # Only "<", "+", "(" and a digit after no digit start a match in the view
            # (first_at), and every "@" is known.
            span_init_hinted(&f, v, n, first, at, False, starts.data, starts.count, ats.data,
                             ats.count)
        # Every replacement of the first pass is numbered before the token pass reads the
        # pieces between them.
        replacements = []
        while span_next(&f, &kind, &start, &end):
            replacement = replace(placeholders, counts, kind, v, n, start, end)
            if replacement is not None:
                if count == size:
                    size = 2 * size + 16
                    grown = <Py_ssize_t*>PyMem_Realloc(spans, 2 * size * sizeof(Py_ssize_t))
                    if grown == NULL:
                        raise MemoryError()
                    spans = grown
                spans[2 * count] = start
                spans[2 * count + 1] = end
                count += 1
                replacements.append(replacement)
        reserve(&o, n + 16)
        copied = 0
        for k in range(count):
            tokens(&o, t, v, copied, spans[2 * k], placeholders, counts, &starts, &cursor)
            put_str(&o, <str>replacements[k])
            copied = spans[2 * k + 1]
        tokens(&o, t, v, copied, n, placeholders, counts, &starts, &cursor)
        if not o.changed:
            return text  # nothing replaced
        return PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, o.buf, o.len)
    finally:
        if v != t and v != NULL:
            PyMem_Free(v)
        PyMem_Free(t)
        PyMem_Free(spans)
        PyMem_Free(o.buf)
        PyMem_Free(starts.data)
        PyMem_Free(ats.data)
