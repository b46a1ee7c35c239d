# cython: language_level=3
"""conservation.numbers, compiled: the numbers of a text as a multiset, in native scans.

    numbers(str rest) -> collections.Counter   # == conservation.numbers(rest)

Two passes over the text's code points, each linear by construction: `blank` (full-width
digits translated, the words that hold numerals without being numbers blanked), then
`read_numbers`.
"""

include "_text.pxi"

from collections import Counter

from cpython.pycapsule cimport PyCapsule_New
from libc.string cimport memmove
from cpython.dict cimport PyDict_GetItemWithError, PyDict_SetItem
from cpython.object cimport PyObject


cdef enum:
    # conservation.MAX_DIGITS: a longer number is not read (_decimal, _chinese_integer).
    MAX_DIGITS = 4300


cdef extern from "Python.h":
    object PyUnicode_FromKindAndData(int kind, const void* buffer, Py_ssize_t size)
    int PyUnicode_4BYTE_KIND


_conservation = None


cdef object _helpers():
    # conservation imports native.py, which imports this module: import it on first use.
    global _conservation
    if _conservation is None:
        from controlplane.compare import conservation

        _conservation = conservation
    return _conservation


# --- character sets --------------------------------------------------------------------


cdef inline bint digit(Py_UCS4 c) noexcept nogil:
    # re_digit, without the call for ASCII (the first Nd digit past 9 is U+0660)
    if c < 0x660:
        return 48 <= c <= 57
    return re_digit(c)


cdef inline bint zh_numeral(Py_UCS4 c) noexcept nogil:
    # _ZH_NUMERAL: 〇零一二两三四五六七八九十百千万亿
    return c in u"〇零一二两三四五六七八九十百千万亿"


cdef inline bint zh_digit(Py_UCS4 c) noexcept nogil:
    # _ZH_DIGIT_CHARS
    return c in u"〇零一二两三四五六七八九"


cdef inline bint measure_word(Py_UCS4 c) noexcept nogil:
    return c in (
        u"个只件条张本台辆位名人次回遍天日月年岁号周元块角分秒点斤克米里吨份倍层楼页章节家所间项种批组对双套"
        u"瓶杯碗盒箱袋包颗粒片支枝根把架座部期届"
    )


cdef inline bint range_mark(Py_UCS4 c) noexcept nogil:
    return c in u"到至或~～-－、"


cdef inline bint numeral_or_digit(Py_UCS4 c) noexcept nogil:
    # _NUMERAL_OR_DIGIT: the numerals and the ASCII digits only.
    return ascii_digit(c) or zh_numeral(c)


cdef inline bint lookbehind_numeral(Py_UCS4 c) noexcept nogil:
    # [{_ZH_NUMERAL}点] in _NOT_NUMBERS_ZH's lookbehinds
    return c == u"点" or zh_numeral(c)


cdef inline Py_UCS4 fullwidth(Py_UCS4 c) noexcept nogil:
    # _FULLWIDTH: ０-９ ． ， ％ to ASCII
    if 0xFF10 <= c <= 0xFF19:
        return <Py_UCS4>(<unsigned int>c - 0xFF10 + 48)
    if c == 0xFF0E:
        return 46
    if c == 0xFF0C:
        return 44
    if c == 0xFF05:
        return 37
    return c


# The characters of the Basic Multilingual Plane each scan stops at, one bit each, so the
# scans pass every other character with one test: the number scan at \d and the numerals,
# the blanking scan at the first characters of _NOT_NUMBERS_ZH and the full-width ones.
cdef unsigned long long NUMBER_STOPS[1024]
cdef unsigned long long BLANK_STOPS[1024]


cdef void _stops() noexcept nogil:
    cdef unsigned int code
    cdef Py_UCS4 c
    for code in range(0x10000):
        c = <Py_UCS4>code
        if re_digit(c) or zh_numeral(c):
            NUMBER_STOPS[code >> 6] |= 1ULL << (code & 63)
        if fullwidth(c) != c or c in u"一统唯之不第三万十千":
            BLANK_STOPS[code >> 6] |= 1ULL << (code & 63)


_stops()


cdef inline bint number_stop(Py_UCS4 c) noexcept nogil:
    cdef unsigned int code = <unsigned int>c
    if code < 0x10000:
        return (NUMBER_STOPS[code >> 6] >> (code & 63)) & 1
    return re_digit(c)


cdef inline bint blank_stop(Py_UCS4 c) noexcept nogil:
    cdef unsigned int code = <unsigned int>c
    return code < 0x10000 and (BLANK_STOPS[code >> 6] >> (code & 63)) & 1


cdef inline Py_ssize_t next_marked(const Py_UCS4* s, Py_ssize_t i, Py_ssize_t n,
                                   const unsigned long long* stops) noexcept nogil:
    """The first position from i whose character `stops` marks or lies past the Basic
    Multilingual Plane, or n: four characters tested at a time, one branch for the four."""
    cdef unsigned int a, b, c, d
    while i + 4 <= n:
        a = s[i]
        b = s[i + 1]
        c = s[i + 2]
        d = s[i + 3]
        if (a | b | c | d) >= 0x10000 or (
            (stops[a >> 6] >> (a & 63)) | (stops[b >> 6] >> (b & 63))
            | (stops[c >> 6] >> (c & 63)) | (stops[d >> 6] >> (d & 63))
        ) & 1:
            break
        i += 4
    while i < n:
        a = s[i]
        if a >= 0x10000 or (stops[a >> 6] >> (a & 63)) & 1:
            return i
        i += 1
    return n


# --- _NOT_NUMBERS_ZH -------------------------------------------------------------------


cdef inline bint at(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i, Py_UCS4 c) noexcept nogil:
    return i < n and s[i] == c


cdef inline Py_ssize_t not_number_length(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    """Length of _NOT_NUMBERS_ZH's match starting exactly at i, or 0 (no two of its
    alternatives can match at one position, so their order does not matter)."""
    cdef Py_UCS4 c = s[i]
    cdef Py_UCS4 d
    if i + 1 >= n or c not in u"一统唯之不第三万十千":
        return 0
    d = s[i + 1]
    if c == u"一":
        if d in u"起样些直定般切旦律致向下边面同共一路生心再贯":
            return 2
        if d == u"点" and i + 2 < n and (s[i + 2] == u"儿" or s[i + 2] == u"点"):
            return 3
        if d == u"会" and at(s, n, i + 2, u"儿"):
            return 3
        return 0
    if c == u"统" or c == u"唯" or c == u"之" or c == u"不":
        return 2 if d == u"一" else 0
    if c == u"第":
        if d == u"一" and at(s, n, i + 2, u"时") and at(s, n, i + 3, u"间"):
            return 4
        return 0
    if c == u"三":
        if d == u"心" and at(s, n, i + 2, u"二") and at(s, n, i + 3, u"意"):
            return 4
        return 0
    # 万(?<![N点]万)[一分], 十(?<![N点]十)分, 千(?<![N点]千)万: no numeral just before.
    if c == u"万":
        if (d == u"一" or d == u"分") and not (i > 0 and lookbehind_numeral(s[i - 1])):
            return 2
        return 0
    if c == u"十":
        if d == u"分" and not (i > 0 and lookbehind_numeral(s[i - 1])):
            return 2
        return 0
    if c == u"千":
        if d == u"万" and not (i > 0 and lookbehind_numeral(s[i - 1])):
            return 2
        return 0
    return 0


cdef Py_ssize_t blank(Py_UCS4* s, Py_ssize_t n) noexcept nogil:
    """_NOT_NUMBERS_ZH.sub(" ", text.translate(_FULLWIDTH)), in place; its length: each
    match becomes one space, its lookbehinds reading the text before blanking.

    Written at m <= i: what a match at i reads (s[i - 1] to s[i + 3]) is not written yet
    when m < i, and when m == i nothing was blanked and s[i - 1] is only translated."""
    cdef Py_ssize_t i = 0, m = 0, j, k
    cdef Py_UCS4 c
    # Nothing moves until a match is blanked: translated in place till then.
    while True:
        i = next_marked(s, i, n, BLANK_STOPS)
        if i == n:
            return n
        c = s[i]
        if c >= 0x10000:
            i += 1
        elif c >= 0xFF05:
            s[i] = fullwidth(c)
            i += 1
        else:
            k = not_number_length(s, n, i)
            if k:
                break
            i += 1
    m = i
    while i < n:
        # The characters up to the next stop move back as they are, in one copy.
        j = next_marked(s, i, n, BLANK_STOPS)
        memmove(s + m, s + i, (j - i) * sizeof(Py_UCS4))
        m += j - i
        i = j
        if i == n:
            break
        c = s[i]
        if blank_stop(c):
            if c >= 0xFF05:
                c = fullwidth(c)
            else:
                k = not_number_length(s, n, i)
                if k:
                    s[m] = 32
                    m += 1
                    i += k
                    continue
        s[m] = c
        m += 1
        i += 1
    return m


# --- _NUMBER ---------------------------------------------------------------------------


cdef inline bint ci_at(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i, const char* word) noexcept nogil:
    # A case-insensitive ASCII word at i (no other character folds to p, e, r, c, n, t or " ").
    cdef Py_ssize_t k = 0
    cdef Py_UCS4 c
    while word[k]:
        if i + k >= n:
            return False
        c = s[i + k]
        if 65 <= c <= 90:
            c = <Py_UCS4>(<unsigned int>c + 32)
        if c != <Py_UCS4>word[k]:
            return False
        k += 1
    return True


cdef Py_ssize_t percent_end(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t e) noexcept nogil:
    """End of `\\s?%|\\s?(?i:percent|per cent)\\b` matched at e, or -1."""
    cdef Py_ssize_t q = e
    if q < n and re_space(s[q]):
        q += 1
    if q < n and s[q] == 37:
        return q + 1
    if ci_at(s, n, q, b"percent") and re_boundary(s, n, q + 7):
        return q + 7
    if ci_at(s, n, q, b"per cent") and re_boundary(s, n, q + 8):
        return q + 8
    return -1


cdef inline Py_ssize_t digits_end(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    while i < n and digit(s[i]):
        i += 1
    return i


cdef inline Py_ssize_t fraction_end(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    # (?:\.\d+)? after i
    if i + 1 < n and s[i] == 46 and digit(s[i + 1]):
        return digits_end(s, n, i + 2)
    return i


cdef inline Py_ssize_t zh_end(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    # [{_ZH_NUMERAL}]+(?:点[{_ZH_DIGIT_CHARS}]+)? from a numeral at i
    while i < n and zh_numeral(s[i]):
        i += 1
    if i + 1 < n and s[i] == u"点" and zh_digit(s[i + 1]):
        i += 2
        while i < n and zh_digit(s[i]):
            i += 1
    return i


cdef inline str text_of(const Py_UCS4* s, Py_ssize_t start, Py_ssize_t end):
    return PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, s + start, end - start)


# The spellings of 0 … 9999, made once each (and hashed once): most numbers are these.
cdef list SMALL = [None] * 10_000


cdef str small(long long value):
    cdef object spelt = SMALL[value]
    if spelt is None:
        spelt = SMALL[value] = str(value)
    return spelt


cdef inline void add(object counts, str key):
    # counts[key] += 1, on the Counter's dict (no __missing__ call)
    cdef PyObject* found = PyDict_GetItemWithError(counts, key)
    if found is NULL:
        PyDict_SetItem(counts, key, 1)
    else:
        PyDict_SetItem(counts, key, (<object>found) + 1)


cdef str plain_integer(const Py_UCS4* s, Py_ssize_t start, Py_ssize_t end, Py_UCS4 big, bint percent):
    """An ASCII digit run of at most 28 digits, spelt as _spell would spell it."""
    cdef char buf[48]
    cdef Py_ssize_t k = 0, z
    cdef long long value = 0
    while start < end and s[start] == 48:
        start += 1
    if end - start <= 4 and not big and not percent:
        while start < end:
            value = value * 10 + (<unsigned int>s[start] - 48)
            start += 1
        return small(value)
    if start == end:
        buf[0] = 48
        k = 1
    else:
        while start < end:
            buf[k] = <char>s[start]
            k += 1
            start += 1
        if big:
            for z in range(4 if big == u"万" else 8):
                buf[k] = 48
                k += 1
    if percent:
        buf[k] = 37
        k += 1
    return buf[:k].decode("ascii")


cdef bint plain_ascii(const Py_UCS4* s, Py_ssize_t start, Py_ssize_t end) noexcept nogil:
    if end - start > 28:
        return False
    while start < end:
        if not ascii_digit(s[start]):
            return False
        start += 1
    return True


cdef void add_spelt(object counts, object value, bint percent):
    # counts[_spell(value) + ("%" if percent else "")] += 1, unless value is None
    cdef str spelt
    if value is None:
        return
    spelt = _helpers()._spell(value)
    add(counts, spelt + "%" if percent else spelt)


cdef inline int zh_digit_value(Py_UCS4 c) noexcept nogil:
    # _ZH_DIGITS, or -1
    if c == u"〇" or c == u"零":
        return 0
    if c == u"一":
        return 1
    if c == u"二" or c == u"两":
        return 2
    if c == u"三":
        return 3
    if c == u"四":
        return 4
    if c == u"五":
        return 5
    if c == u"六":
        return 6
    if c == u"七":
        return 7
    if c == u"八":
        return 8
    if c == u"九":
        return 9
    return -1


cdef long long section(const Py_UCS4* s, Py_ssize_t start, Py_ssize_t end) noexcept nogil:
    """conservation._section (a number below 10,000 in numerals), or -1 for None."""
    cdef long long total = 0, unit, last_unit = 10_000
    cdef int current = -1, value
    cdef bint zero = False
    cdef Py_UCS4 c
    while start < end:
        c = s[start]
        start += 1
        if c == u"零" or c == u"〇":
            zero = True
            current = -1
            continue
        value = zh_digit_value(c)
        if value >= 0:
            if current >= 0:
                return -1  # two digits in a row
            current = value
            continue
        if c == u"十":
            unit = 10
        elif c == u"百":
            unit = 100
        elif c == u"千":
            unit = 1000
        else:
            return -1
        if unit >= last_unit:
            return -1
        total += (1 if current < 0 else current) * unit
        current = -1
        last_unit = unit
    if current >= 0:
        total += current * (last_unit // 10 if 100 <= last_unit < 10_000 and not zero else 1)
    return total


cdef long long chinese_integer(const Py_UCS4* s, Py_ssize_t start, Py_ssize_t end) noexcept nogil:
    """conservation._chinese_integer of a run that is not all digits, or -1 for None (it
    stays below 10**13: sections below 10,000 times 亿 and 万)."""
    cdef long long total = 0, head, big
    cdef Py_ssize_t q
    cdef int tail
    cdef Py_UCS4 big_char
    for big_char in (u"亿", u"万"):
        q = start
        while q < end and s[q] != big_char:
            q += 1
        if q == end:
            continue
        head = section(s, start, q) if q > start else 1
        if head < 0:
            return -1
        big = 100_000_000 if big_char == u"亿" else 10_000
        total += head * big
        start = q + 1
        if end - start == 1:
            tail = zh_digit_value(s[start])
            if tail > 0:  # 一万二 = 12000
                return total + tail * big // 10
    if start == end:
        return total
    head = section(s, start, end)
    return -1 if head < 0 else total + head


cdef object spelt_chinese_decimal(const Py_UCS4* s, Py_ssize_t start, Py_ssize_t dot, Py_ssize_t end):
    """spelt_chinese of a match with 点 at `dot` (一点五 → "1.5", 三点零 → "3"):
    conservation's Decimal(whole) + Decimal("0." + fraction), spelt by _spell. The
    fraction holds digits only (the _ZH pattern). Spelt here when the sum has at most 28
    digits (Decimal's precision: it is then exact); else by conservation."""
    cdef Py_ssize_t i, last = dot
    cdef long long whole = 0
    cdef bint all_digits = True
    for i in range(start, dot):
        if zh_digit_value(s[i]) < 0:
            all_digits = False
            break
    if all_digits:
        if dot - start > 18:  # may not fit: conservation reads it
            return _helpers()._spelt_chinese(text_of(s, start, end))
        for i in range(start, dot):
            whole = whole * 10 + zh_digit_value(s[i])
    else:
        whole = chinese_integer(s, start, dot)
        if whole < 0:
            return None
    for i in range(dot + 1, end):
        if zh_digit_value(s[i]) != 0:
            last = i  # the fraction's last non-zero digit
    spelt = str(whole)
    if len(spelt) + (end - dot - 1) > 28:
        return _helpers()._spelt_chinese(text_of(s, start, end))
    if last == dot:
        return spelt  # a fraction of zeros: the whole number
    return spelt + "." + "".join([chr(48 + zh_digit_value(s[i])) for i in range(dot + 1, last + 1)])


cdef object spelt_chinese(const Py_UCS4* s, Py_ssize_t start, Py_ssize_t end):
    """conservation._spelt_chinese of s[start:end] (a _ZH match): a str or None. Integers
    are read here; a fraction (点) or a digit-by-digit run over 28 digits by conservation."""
    cdef Py_ssize_t i
    cdef bint all_digits = True
    cdef long long value
    cdef char buf[32]
    cdef int k = 0
    for i in range(start, end):
        if s[i] == u"点":
            return spelt_chinese_decimal(s, start, i, end)
        if zh_digit_value(s[i]) < 0:
            all_digits = False
    if all_digits:
        if end - start > MAX_DIGITS:
            return None
        if end - start > 28:  # Decimal rounds it to 28 digits: conservation spells it
            return _helpers()._spelt_chinese(text_of(s, start, end))
        for i in range(start, end):
            if k or zh_digit_value(s[i]):
                buf[k] = 48 + zh_digit_value(s[i])
                k += 1
        if k <= 4:
            value = 0
            for i in range(k):
                value = value * 10 + (buf[i] - 48)
            return small(value)
        return buf[:k].decode("ascii")
    value = chinese_integer(s, start, end)
    if value < 0:
        return None
    return small(value) if value < 10_000 else str(value)


cdef void add_chinese(object counts, const Py_UCS4* s, Py_ssize_t start, Py_ssize_t end, bint percent) except *:
    spelt = spelt_chinese(s, start, end)
    if spelt is not None:
        add(counts, spelt + "%" if percent else spelt)


cdef bint lone_numeral_counts(const Py_UCS4* b, Py_ssize_t m, Py_ssize_t start, Py_ssize_t end) noexcept nogil:
    """A lone 一 … 九 (body[start:end], one character) is a number: before a measure word
    (but 一点), in a range (三到五, 3至5), or after 第."""
    cdef bint has_follows = end < m
    cdef Py_UCS4 follows = b[end] if has_follows else 0
    cdef bint has_before = start > 0
    cdef Py_UCS4 before = b[start - 1] if has_before else 0
    if has_follows and measure_word(follows) and not (b[start] == u"一" and follows == u"点"):
        return True
    if has_follows and range_mark(follows) and end + 1 < m and numeral_or_digit(b[end + 1]):
        return True
    if has_before and range_mark(before) and start >= 2 and numeral_or_digit(b[start - 2]):
        return True
    return has_before and before == u"第"


cdef void read_numbers(const Py_UCS4* b, Py_ssize_t m, object counts) except *:
    """_NUMBER's branches at each position of the blanked body, in the regex's order (Arabic
    digits with comma groups, decimals, 万/亿 and percent; 百分之; Chinese numerals), jumping
    past each match as finditer does. Every look-ahead is bounded (a percent spelling) and
    every run is consumed once. Integers and decimals of at most 28 digits (in any script)
    and Chinese integers and decimals (一点五) are spelt here; longer numbers, which Decimal
    rounds to 28 digits, by conservation's own helpers."""
    cdef Py_ssize_t i = 0, j, e, end, pct, commas
    cdef int shift
    cdef Py_UCS4 c, big
    cdef bint comma, point, percent
    while i < m:
        i = next_marked(b, i, m, NUMBER_STOPS)  # neither \d nor a numeral: most characters
        if i == m:
            break
        c = b[i]
        if not number_stop(c):  # past the plane and no digit
            i += 1
            continue
        if digit(c):
            # (?P<arabic>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?P<big>[万亿])?(?P<pct>…)?
            j = digits_end(b, m, i)
            e = j
            comma = False
            commas = 0
            if j - i <= 3:
                while (
                    e + 3 < m and b[e] == 44
                    and digit(b[e + 1]) and digit(b[e + 2]) and digit(b[e + 3])
                ):
                    e += 4
                    commas += 1
                comma = commas > 0
            end = fraction_end(b, m, e)
            point = end > e
            e = end
            big = 0
            shift = 0
            if end < m and (b[end] == u"万" or b[end] == u"亿"):
                big = b[end]
                shift = 4 if big == u"万" else 8
                end += 1
            pct = percent_end(b, m, end)
            percent = pct >= 0
            if percent:
                end = pct
            if not comma and e == j and plain_ascii(b, i, j):
                add(counts, plain_integer(b, i, j, big, percent))
            elif e - i - commas > MAX_DIGITS:
                pass  # _decimal: too long to be a number
            elif e - i - commas - point + shift <= 28:
                add(counts, spelt_decimal(b, i, e, shift, percent))
            else:
                arabic_decimal(counts, text_of(b, i, e), big, percent)
            i = end
            continue
        if not zh_numeral(c):
            i += 1
            continue
        if c == u"百" and i + 3 < m and b[i + 1] == u"分" and b[i + 2] == u"之":
            # 百分之(?:(?P<zh_pct>…)|(?P<ar_pct>\d+(?:\.\d+)?))
            j = i + 3
            if zh_numeral(b[j]):
                end = zh_end(b, m, j)
                add_chinese(counts, b, j, end, True)
                i = end
                continue
            if digit(b[j]):
                e = digits_end(b, m, j)
                end = fraction_end(b, m, e)
                if end == e and plain_ascii(b, j, e):
                    add(counts, plain_integer(b, j, e, 0, True))
                elif end - j > MAX_DIGITS:
                    pass  # _decimal: too long to be a number
                elif end - j - (end > e) <= 28:
                    add(counts, spelt_decimal(b, j, end, 0, True))
                else:
                    add_spelt(counts, _helpers()._decimal(text_of(b, j, end)), True)
                i = end
                continue
        # (?P<zh>…)(?P<pct2>…)?
        end = zh_end(b, m, i)
        pct = percent_end(b, m, end)
        percent = pct >= 0
        if end - i == 1 and zh_digit(c) and not percent:
            if not lone_numeral_counts(b, m, i, end):
                i = end
                continue
        add_chinese(counts, b, i, end, percent)
        i = pct if percent else end


cdef str spelt_decimal(const Py_UCS4* b, Py_ssize_t start, Py_ssize_t end, int shift, bint percent):
    """_spell(Decimal(b[start:end] without its commas) * 10**shift): digits of any script,
    commas and at most one point, at most 28 digits with the shift (so Decimal holds the
    value exactly and normalize() rounds nothing): the point moved, zeros stripped."""
    cdef char digits[32]
    cdef char out[48]
    cdef int n = 0, point = -1, k = 0, first, last, d
    cdef Py_UCS4 c
    for start in range(start, end):
        c = b[start]
        if c == 44:
            continue
        if c == 46:
            point = n
            continue
        digits[n] = <char>(48 + (<int>c - 48 if c < 128 else Py_UNICODE_TODECIMAL(c)))
        n += 1
    if point < 0:
        point = n
    point += shift
    for d in range(point):  # the whole part, without its leading zeros
        if k or (d < n and digits[d] != 48):
            out[k] = digits[d] if d < n else 48
            k += 1
    if not k:
        out[0] = 48
        k = 1
    last = n
    while last > point and digits[last - 1] == 48:
        last -= 1
    if last > point:
        out[k] = 46
        k += 1
        for first in range(point, last):
            out[k] = digits[first]
            k += 1
    if percent:
        out[k] = 37
        k += 1
    return out[:k].decode("ascii")


cdef void arabic_decimal(object counts, str arabic, Py_UCS4 big, bint percent) except *:
    helpers = _helpers()
    value = helpers._decimal(arabic.replace(",", ""))
    if value is not None and big:
        value *= helpers._ZH_BIG[chr(big)]
    add_spelt(counts, value, percent)


def numbers(str rest):
    """conservation.numbers(rest): numbers as a multiset, each in one spelling."""
    cdef Py_ssize_t n = len(rest)
    cdef Py_UCS4* s
    if not n:
        return Counter.__new__(Counter)
    s = code_points(rest)
    try:
        return numbers_of(s, n, rest.isascii())
    finally:
        PyMem_Free(s)


cdef object numbers_of(Py_UCS4* s, Py_ssize_t n, bint ascii):
    """numbers() of the n code points at s, which it blanks in place (`blank`) unless they
    are all ASCII (which `blank` leaves as they are)."""
    cdef object counts = Counter.__new__(Counter)  # filled through its dict
    read_numbers(s, n if ascii else blank(s, n), counts)
    return counts


# numbers_of by address, for the one-call reader (_spans.read).
numbers_of_capsule = PyCapsule_New(<void*>numbers_of, NUMBERS_OF, NULL)
