# cython: language_level=3
"""conservation's sentence_count, length and negations of a text, in one native scan.

`counts(text)` returns exactly what conservation.py's regexes give
(tests/ingest/test_native_counts.py), reading each code point a bounded number of times;
the rules are docs/evidence.md's ("Comparators"), and each scanner says how it keeps
its bound.
"""

from collections import Counter

from cpython.pycapsule cimport PyCapsule_New
from libc.stdint cimport uint64_t

include "_text.pxi"

ctypedef unsigned int cp  # a code point as a plain C integer (Cython does Py_UCS4 arithmetic on str)

# --- the reader's constants (tests check them against conservation.py) ---------------

_CLOSERS = "\"'”’」』》）)]】"
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st vs etc inc ltd co corp fig eg ie approx dept est "
    "jan feb mar apr jun jul aug sep sept oct nov dec mon tue tues wed thu thur thurs fri sat sun".split()
)
_NOT_NEGATING_ZH = (
    "非常 无论 别人 别的 别处 特别 区别 分别 告别 类别 级别 性别 识别 未来 否则 是否 能否 "
    "可否 与否 不过 不少 不错 不久 不断 不管 不仅 莫名 无数 无限 无比 无线 除非 "
    "差不多 了不起 对不起 不得不"
).split()
_NEGATION_ZH_CHARS = "不没无未非别莫勿否"
_ZH_NUMERAL = "〇零一二两三四五六七八九十百千万亿"
_ZH_DIGIT_CHARS = "〇零一二两三四五六七八九"
# The English words _NEGATION_EN matches (each lower case, Capitalised or UPPER CASE),
# and the key each is counted under.
_NEGATION_EN_WORDS = {
    "not": "not", "none": "none", "nothing": "nothing", "nobody": "nobody",
    "nowhere": "nowhere", "nor": "nor", "no": "no", "never": "never", "neither": "neither",
    "without": "without", "cannot": "not", "unable": "not",
}

# The keys of the Counter: Chinese characters first, then the English words.
_KEYS = (*_NEGATION_ZH_CHARS, "not", "none", "nothing", "nobody", "nowhere", "nor", "no",
         "never", "neither", "without")

cdef enum:
    N_ZH = 9
    N_KEYS = 19
    N_EN_WORDS = 12
    MAX_BLANK = 64
    MAX_GROUP = 32
    MAX_IN_GROUP = 8
    MAX_IN_BUCKET = 12

cdef enum:
    # ASCII classes
    A_LETTER = 1
    A_DIGIT = 2
    A_DOT = 4
    A_END = 8
    A_NEG = 16

cdef enum:
    # classes of U+4E00..U+9FFF
    Z_NUMERAL = 1
    Z_DIGIT = 2
    Z_NEG = 4
    Z_BLANK = 8  # starts a word _NOT_NEGATING_ZH blanks

cdef enum:
    CJK_LO = 0x4E00
    CJK_HI = 0x9FFF
    LING = 0x3007  # 〇
    BAI = 0x767E  # 百
    FEN = 0x5206  # 分
    ZHI = 0x4E4B  # 之
    DIAN = 0x70B9  # 点

cdef unsigned char ASCII_CLASS[128]
cdef unsigned char ZH_CLASS[CJK_HI - CJK_LO + 1]
cdef unsigned char ZH_NEG_KEY[CJK_HI - CJK_LO + 1]  # key index + 1
cdef unsigned char ZH_GROUP[CJK_HI - CJK_LO + 1]  # blank-word group + 1
cdef Py_UCS4 BLANK_WORD[MAX_BLANK][3]
cdef int BLANK_LEN[MAX_BLANK]
cdef int GROUP_SIZE[MAX_GROUP]
cdef int GROUP_WORD[MAX_GROUP][MAX_IN_GROUP]
cdef uint64_t EN_PACKED[N_EN_WORDS]
cdef int EN_KEY[N_EN_WORDS]
cdef uint64_t ABBREVIATION_PACKED[26][MAX_IN_BUCKET]  # by first letter
cdef int ABBREVIATION_BUCKET[26]


cdef uint64_t _pack(str word):
    cdef uint64_t packed = 0
    cdef int k
    for k, ch in enumerate(word):
        packed |= (<uint64_t>ord(ch)) << (8 * k)
    return packed


def _init_tables():
    cdef int k, g
    for k in range(128):
        ASCII_CLASS[k] = 0
    for ch in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz":
        ASCII_CLASS[ord(ch)] |= A_LETTER
    for ch in "0123456789":
        ASCII_CLASS[ord(ch)] |= A_DIGIT
    ASCII_CLASS[ord(".")] |= A_DOT
    ASCII_CLASS[ord("!")] |= A_END
    ASCII_CLASS[ord("?")] |= A_END
    for ch in "NnWwCcUu":
        ASCII_CLASS[ord(ch)] |= A_NEG
    for k in range(CJK_HI - CJK_LO + 1):
        ZH_CLASS[k] = 0
        ZH_NEG_KEY[k] = 0
        ZH_GROUP[k] = 0
    for ch in _ZH_NUMERAL:
        if CJK_LO <= ord(ch) <= CJK_HI:
            ZH_CLASS[ord(ch) - CJK_LO] |= Z_NUMERAL
    for ch in _ZH_DIGIT_CHARS:
        if CJK_LO <= ord(ch) <= CJK_HI:
            ZH_CLASS[ord(ch) - CJK_LO] |= Z_DIGIT
    for k, ch in enumerate(_NEGATION_ZH_CHARS):
        ZH_CLASS[ord(ch) - CJK_LO] |= Z_NEG
        ZH_NEG_KEY[ord(ch) - CJK_LO] = k + 1
    # The regex's alternation: longest first, the list's order among equal lengths.
    words = sorted(_NOT_NEGATING_ZH, key=len, reverse=True)
    assert len(words) <= MAX_BLANK
    groups = {}
    for k, word in enumerate(words):
        assert 2 <= len(word) <= 3 and all(CJK_LO <= ord(ch) <= CJK_HI for ch in word)
        for g, ch in enumerate(word):
            BLANK_WORD[k][g] = ord(ch)
        BLANK_LEN[k] = len(word)
        groups.setdefault(word[0], []).append(k)
    assert len(groups) <= MAX_GROUP
    for g, (first, members) in enumerate(groups.items()):
        assert len(members) <= MAX_IN_GROUP
        ZH_GROUP[ord(first) - CJK_LO] = g + 1
        ZH_CLASS[ord(first) - CJK_LO] |= Z_BLANK
        GROUP_SIZE[g] = len(members)
        for k, member in enumerate(members):
            GROUP_WORD[g][k] = member
    for k, (word, key) in enumerate(_NEGATION_EN_WORDS.items()):
        EN_PACKED[k] = _pack(word)
        EN_KEY[k] = N_ZH + _KEYS[N_ZH:].index(key)
    for k in range(26):
        ABBREVIATION_BUCKET[k] = 0
    for word in sorted(_ABBREVIATIONS):
        assert 2 <= len(word) <= 6 and word.isascii() and word.isalpha() and word.islower()
        g = ord(word[0]) - ord("a")
        assert ABBREVIATION_BUCKET[g] < MAX_IN_BUCKET
        ABBREVIATION_PACKED[g][ABBREVIATION_BUCKET[g]] = _pack(word)
        ABBREVIATION_BUCKET[g] += 1


_init_tables()
_new_counter = Counter.__new__  # an empty Counter (its __init__ only reads arguments)


# --- character classes ---------------------------------------------------------------

cdef inline bint is_closer(cp c) noexcept nogil:
    return (
        c == 0x22 or c == 0x27 or c == 0x29 or c == 0x5D or c == 0x201D or c == 0x2019
        or c == 0x300D or c == 0x300F or c == 0x300B or c == 0xFF09 or c == 0x3011
    )


cdef inline bint is_end_mark(cp c) noexcept nogil:  # [。！？!?]
    return c == 0x21 or c == 0x3F or c == 0x3002 or c == 0xFF01 or c == 0xFF1F


cdef inline bint is_strip(cp c) noexcept nogil:  # _is_abbreviation's lstrip set
    return c == 0x22 or c == 0x27 or c == 0x201C or c == 0x2018 or c == 0x28 or c == 0xFF08


cdef inline bint is_latin(cp c) noexcept nogil:  # [A-Za-z\u00c0-\u024f]
    return ascii_letter(c) or (0xC0 <= c <= 0x24F)


cdef inline bint is_unit_digit(cp c) noexcept nogil:  # [0-9０-９]
    return ascii_digit(c) or (0xFF10 <= c <= 0xFF19)


cdef inline bint is_unit_number(cp c) noexcept nogil:  # [0-9０-９,.，．]
    return is_unit_digit(c) or c == 0x2C or c == 0x2E or c == 0xFF0C or c == 0xFF0E


cdef inline bint is_apostrophe(cp c) noexcept nogil:  # ['’]
    return c == 0x27 or c == 0x2019


cdef inline bint is_alpha(cp c) noexcept nogil:  # str.isalpha()
    if c < 128:
        return ascii_letter(c)
    return Py_UNICODE_ISALPHA(c)


cdef inline bint is_word(cp c) noexcept nogil:  # \w
    if c < 128:
        return ascii_letter(c) or ascii_digit(c) or c == 95
    return re_word(c)


cdef inline bint zh_numeral(cp c) noexcept nogil:
    if CJK_LO <= c <= CJK_HI:
        return ZH_CLASS[c - CJK_LO] & Z_NUMERAL
    return c == LING


cdef inline bint zh_digit(cp c) noexcept nogil:
    if CJK_LO <= c <= CJK_HI:
        return ZH_CLASS[c - CJK_LO] & Z_DIGIT
    return c == LING


# --- the scanners --------------------------------------------------------------------

cdef struct State:
    Py_ssize_t n
    # sentences (the body is s[lo:hi])
    Py_ssize_t lo
    Py_ssize_t hi
    Py_ssize_t ends
    Py_ssize_t last_end
    # length
    Py_ssize_t units
    # negations: per key, how many and the order each was first seen (per language)
    Py_ssize_t count[N_KEYS]
    Py_ssize_t first[N_KEYS]
    Py_ssize_t seen
    Py_ssize_t en_checked  # the last position an English negation was looked for


cdef inline void add_key(State* st, int key) noexcept nogil:
    if st.count[key] == 0:
        st.first[key] = st.seen
        st.seen += 1
    st.count[key] += 1


cdef inline bint could_negate(cp first, cp second) noexcept nogil:
    """Whether a spelling of _NEGATION_EN starts with these two characters (in either
    case): n't, no..., never, neither, without, cannot, unable."""
    if is_apostrophe(second):
        return first == 0x6E
    first |= 0x20
    second |= 0x20
    if first == 0x6E:
        return second == 0x6F or second == 0x65
    if first == 0x77:
        return second == 0x69
    if first == 0x63:
        return second == 0x61
    return second == 0x6E


cdef int en_negation_at(const cp* s, Py_ssize_t n, Py_ssize_t q, bint* contraction) noexcept nogil:
    """The key of _NEGATION_EN's match starting exactly at q, or -1."""
    cdef unsigned int c
    cdef Py_ssize_t k = q
    cdef uint64_t packed = 0
    cdef bint all_upper = True, rest_lower = True
    cdef int j
    contraction[0] = False
    if s[q] == 0x6E and q + 2 < n and is_apostrophe(s[q + 1]) and s[q + 2] == 0x74:
        if q + 3 == n or not is_word(s[q + 3]):
            contraction[0] = True
            return N_ZH  # n't → not
        return -1
    # Every other spelling is a whole word (its letters, then \b): the run of word
    # characters from q must be one, in lower case, Capitalised or UPPER CASE.
    while k < n and is_word(s[k]):
        c = s[k]
        if c >= 128 or k - q >= 7:
            return -1
        if 65 <= c <= 90:
            if k > q:
                rest_lower = False
            c += 32
        elif 97 <= c <= 122:
            all_upper = False
        else:
            return -1
        packed |= (<uint64_t>c) << (8 * (k - q))
        k += 1
    if k - q < 2 or not (rest_lower or all_upper):
        return -1
    for j in range(N_EN_WORDS):
        if EN_PACKED[j] == packed:
            return EN_KEY[j]
    return -1


cdef inline void en_negation(const cp* s, State* st, Py_ssize_t q) noexcept nogil:
    """Counts _NEGATION_EN's match at q unless it is inside a word (each q looked at once).

    A match after a letter is dropped, and such a skipped match never hides a counted one:
    a counted match starts after a non-letter or is n't, and no negation word ends in "n".
    So each candidate position is decided on its own."""
    cdef bint contraction
    cdef int key
    if q <= st.en_checked or q >= st.n:
        return
    st.en_checked = q
    if not (s[q] < 128 and ASCII_CLASS[s[q]] & A_NEG):
        return
    if not could_negate(s[q], s[q + 1]):  # (s[n] is the copy's closing 0)
        return
    key = en_negation_at(s, st.n, q, &contraction)
    if key < 0:
        return
    if not contraction and q > 0 and is_alpha(s[q - 1]):
        return  # inside a word: "piano", "announce"
    add_key(st, key)


cdef inline Py_ssize_t latin_word(const cp* s, State* st, Py_ssize_t i) noexcept nogil:
    """_LATIN_UNIT's first branch from i (a Latin letter): its end. Looks for English
    negations where one can start inside it: at its start, after × or ÷ (the range's
    only non-letters), after an apostrophe join, and at an "n" before one (n't)."""
    cdef Py_ssize_t n = st.n
    cdef Py_ssize_t j = i
    cdef cp c
    st.units += 1
    en_negation(s, st, i)
    while j < n:
        c = s[j]
        if c < 128:
            if not (ASCII_CLASS[c] & A_LETTER):
                break
        elif c < 0xC0 or c > 0x24F:
            break
        elif c == 0xD7 or c == 0xF7:
            en_negation(s, st, j + 1)
        j += 1
    while j + 1 < n and is_apostrophe(s[j]) and ascii_letter(s[j + 1]):
        if s[j - 1] == 0x6E:
            en_negation(s, st, j - 1)
        en_negation(s, st, j + 1)
        j += 2
        while j < n and ascii_letter(s[j]):
            j += 1
    return j


cdef int python_abbreviation(const cp* word, Py_ssize_t m) except -1:
    """The end of _is_abbreviation for a word with a non-ASCII character, in Python
    (its lower() is the Unicode one: "İ" → "i̇", KELVIN SIGN → "k")."""
    text = "".join([chr(word[k]) for k in range(m)]).lower()
    return text in _ABBREVIATIONS or (len(text) == 1 and text.isalpha())


cdef int is_abbreviation(const cp* s, State* st, Py_ssize_t dot) except -1:
    """_is_abbreviation(body, dot) for the body s[lo:hi]."""
    cdef Py_ssize_t lo = st.lo
    cdef Py_ssize_t k, p, firm = 0, pending = 0, m = 0
    cdef int g
    cdef unsigned int c
    cdef cp word[8]
    cdef bint ascii = True
    cdef uint64_t packed = 0
    if dot == lo or not is_alpha(s[dot - 1]):
        return False
    # The word is s[start:dot], start after text.rfind(" ", max(0, dot - 12), dot) (the
    # body's start when there is none); word.lstrip(...).replace(".", "") is s[p:dot] but
    # its dots, s[start:p] being the stripped run of quotes and brackets. More than 6
    # characters is no abbreviation (the longest is "approx"; lower() never shortens a
    # word), so the read back stops there, wherever the space is.
    p = dot
    k = dot - 1
    while k >= lo:
        c = s[k]
        if ascii_letter(c):
            firm += pending + 1
            pending = 0
            p = k
        elif c == 0x20 and k >= dot - 12:
            break
        elif c == 0x2E:
            firm += pending
            pending = 0
            p = k
        elif is_strip(c):
            pending += 1
        else:
            firm += pending + 1
            pending = 0
            p = k
        if firm > 6:
            return False
        k -= 1
    for k in range(p, dot):
        c = s[k]
        if c != 0x2E:
            word[m] = c
            m += 1
            if c >= 128:
                ascii = False
    if not ascii:
        return python_abbreviation(word, m)
    if m == 1:
        return ascii_letter(word[0])
    for k in range(m):
        c = word[k]
        if 65 <= c <= 90:
            c += 32
        elif not 97 <= c <= 122:
            return False  # every abbreviation is letters
        packed |= (<uint64_t>c) << (8 * k)
    g = word[0] - 97 if word[0] >= 97 else word[0] - 65
    for k in range(ABBREVIATION_BUCKET[g]):
        if ABBREVIATION_PACKED[g][k] == packed:
            return True
    return False


cdef Py_ssize_t sentence_dot(const cp* s, State* st, Py_ssize_t i) except -2:
    """_SENTENCE_END's "." branch at i: the position after its match, or i + 1.

    A "." ends a sentence when it is not followed by "." and is followed by whitespace, the
    end or a closer, is not the last dot of an ellipsis and does not close an abbreviation.
    is_abbreviation's read back stops once the word, dots and leading quotes aside, has
    more than 6 characters, so a character is read back over by a few dots at most."""
    cdef Py_ssize_t hi = st.hi, j = i + 1
    if j < hi and (s[j] == 0x2E or not (Py_UNICODE_ISSPACE(s[j]) or is_closer(s[j]))):
        return i + 1
    while j < hi and is_closer(s[j]):
        j += 1
    if i > st.lo and s[i - 1] == 0x2E:
        return j  # the last dot of an ellipsis
    if is_abbreviation(s, st, i):
        return j
    st.ends += 1
    st.last_end = j
    return j


cdef inline Py_ssize_t sentence_run(const cp* s, State* st, Py_ssize_t i) noexcept nogil:
    """_SENTENCE_END's first branch at i: [。！？!?]+ and closers."""
    cdef Py_ssize_t hi = st.hi, j = i + 1
    while j < hi and is_end_mark(s[j]):
        j += 1
    while j < hi and is_closer(s[j]):
        j += 1
    st.ends += 1
    st.last_end = j
    return j


cdef inline Py_ssize_t zh_number_length(const cp* s, Py_ssize_t n, Py_ssize_t j) noexcept nogil:
    """The length of _ZH's match at j (s[j] a numeral)."""
    cdef Py_ssize_t k = j + 1
    while k < n and zh_numeral(s[k]):
        k += 1
    if k + 1 < n and s[k] == DIAN and zh_digit(s[k + 1]):
        k += 2
        while k < n and zh_digit(s[k]):
            k += 1
    return k - j


cdef inline int blank_length(const cp* s, Py_ssize_t n, Py_ssize_t i, int group) noexcept nogil:
    """The length of _NOT_NEGATING_ZH_RE's match at i (0: none); group: s[i]'s words."""
    cdef int k, w, g
    cdef bint ok
    for k in range(GROUP_SIZE[group]):
        w = GROUP_WORD[group][k]
        if i + BLANK_LEN[w] > n:
            continue
        ok = True
        for g in range(1, BLANK_LEN[w]):
            if s[i + g] != BLANK_WORD[w][g]:
                ok = False
                break
        if ok:
            return BLANK_LEN[w]
    return 0


def counts(str text not None):
    """(sentence_count(text), length(text), negations(text)), as conservation.py reads them.

    Sentences: runs of 。！？!? with their closers, and sentence_dot, in the stripped text.
    Length: Latin units (_LATIN_UNIT: letters with apostrophe joins, digit runs with their
    separators and a percent sign) plus CJK characters minus the extra characters of each
    Chinese number run (_ZH_NUMBER_RUN). Negations: the Chinese characters outside the
    words _NOT_NEGATING_ZH blanks (leftmost, longest first), then _NEGATION_EN's words."""
    cdef Py_UCS4* buffer = code_points(text)
    try:
        return counts_of(buffer, len(text))
    finally:
        PyMem_Free(buffer)


cdef tuple counts_of(const Py_UCS4* buffer, Py_ssize_t n):
    """counts() of the n code points at buffer, which must hold a 0 after them (a scanner
    reads one past a letter)."""
    cdef const cp* s = <const cp*>buffer
    cdef State st
    cdef Py_ssize_t i, j, length, number_next = 0, blank_next = 0, zh_extra = 0, cjk = 0
    cdef cp c
    cdef unsigned char f
    cdef int k
    cdef int order[N_KEYS]
    st.n = n
    for k in range(N_KEYS):
        st.count[k] = 0
        st.first[k] = 0
    st.seen = 0
    st.en_checked = -1
    st.units = 0
    st.ends = 0
    # body = text.strip()
    st.lo = 0
    while st.lo < n and Py_UNICODE_ISSPACE(s[st.lo]):
        st.lo += 1
    st.hi = n
    while st.hi > st.lo and Py_UNICODE_ISSPACE(s[st.hi - 1]):
        st.hi -= 1
    st.last_end = st.lo
    i = 0
    while i < n:
        c = s[i]
        if c < 128:
            f = ASCII_CLASS[c]
            if f == 0:
                i += 1
            elif f & A_LETTER:
                i = latin_word(s, &st, i)
            elif f & A_DIGIT:
                i = number_unit(s, &st, i)
            elif f & A_DOT:
                i = sentence_dot(s, &st, i)
            else:
                i = sentence_run(s, &st, i)
        elif CJK_LO <= c <= CJK_HI:
            cjk += 1
            f = ZH_CLASS[c - CJK_LO]
            if f == 0:
                # The ideographs that follow, counted in one tight loop up to the next
                # one with a class (most of a Chinese text).
                i += 1
                while i < n:
                    c = s[i]
                    if c < CJK_LO or c > CJK_HI or ZH_CLASS[c - CJK_LO]:
                        break
                    cjk += 1
                    i += 1
                continue
            if f & Z_NUMERAL and i >= number_next:
                if c == BAI and i + 3 < n and s[i + 1] == FEN and s[i + 2] == ZHI and zh_numeral(s[i + 3]):
                    length = 3 + zh_number_length(s, n, i + 3)
                else:
                    length = zh_number_length(s, n, i)
                zh_extra += length - 1
                number_next = i + length
            if i >= blank_next:
                if f & Z_BLANK:
                    blank_next = i + blank_length(s, n, i, ZH_GROUP[c - CJK_LO] - 1)
                if f & Z_NEG and i >= blank_next:
                    add_key(&st, ZH_NEG_KEY[c - CJK_LO] - 1)
            i += 1
        elif 0xC0 <= c <= 0x24F:
            i = latin_word(s, &st, i)
        elif 0xFF10 <= c <= 0xFF19:
            i = number_unit(s, &st, i)
        elif c == 0x3002 or c == 0xFF01 or c == 0xFF1F:
            i = sentence_run(s, &st, i)
        elif c == LING:
            cjk += 1
            if i >= number_next:
                length = zh_number_length(s, n, i)
                zh_extra += length - 1
                number_next = i + length
            i += 1
        else:
            if (0x3400 <= c <= 0x4DBF) or (0xF900 <= c <= 0xFAFF):
                cjk += 1
            i += 1
    found = _new_counter(Counter)
    for k in range(N_KEYS):
        order[k] = k
    # Chinese keys first, then English ones, each in the order first seen.
    _sort_keys(order, st.first, 0, N_ZH)
    _sort_keys(order, st.first, N_ZH, N_KEYS)
    for k in range(N_KEYS):
        if st.count[order[k]]:
            found[_KEYS[order[k]]] = st.count[order[k]]
    sentences = st.ends + (1 if st.last_end < st.hi else 0)
    return sentences, st.units + cjk - zh_extra, found


cdef Py_ssize_t number_unit(const cp* s, State* st, Py_ssize_t i) except -2:
    """_LATIN_UNIT's second branch from i (a digit): its end. A "." closing the run may
    end a sentence ("It costs 35. Then")."""
    cdef Py_ssize_t n = st.n, j = i + 1
    st.units += 1
    while j < n and is_unit_number(s[j]):
        j += 1
    if j < n and (s[j] == 0x25 or s[j] == 0xFF05):
        return j + 1
    if s[j - 1] == 0x2E:
        sentence_dot(s, st, j - 1)
    return j


cdef inline void _sort_keys(int* order, Py_ssize_t* first, int lo, int hi) noexcept nogil:
    cdef int a, b, t
    for a in range(lo + 1, hi):
        b = a
        while b > lo and first[order[b - 1]] > first[order[b]]:
            t = order[b]
            order[b] = order[b - 1]
            order[b - 1] = t
            b -= 1


# counts_of by address, for the one-call reader (_spans.read).
counts_of_capsule = PyCapsule_New(<void*>counts_of, COUNTS_OF, NULL)

# --- the diff of two readings (comparators.compare_text_conservation) ------------------


def multiset_diff(object edge, object cloud):
    """(sorted(edge.elements()), sorted(cloud.elements()), sorted((cloud - edge).elements()),
    sorted((edge - cloud).elements())) of two Counters of strings, in one walk over their
    keys sorted once."""
    cdef list e = [], c = [], missing = [], extra = []
    cdef Py_ssize_t a, b, k
    for key in sorted(set(<dict>edge).union(<dict>cloud)):
        a = (<dict>edge).get(key, 0)
        b = (<dict>cloud).get(key, 0)
        for k in range(a):
            e.append(key)
        for k in range(b):
            c.append(key)
        for k in range(b - a):  # Counter subtraction keeps what stays above 0
            missing.append(key)
        for k in range(a - b):
            extra.append(key)
    return e, c, missing, extra


def set_diff(object edge, object cloud):
    """(sorted(edge), sorted(cloud), sorted(cloud - edge), sorted(edge - cloud)) of two sets
    of strings, in one walk over their union sorted once."""
    cdef list e = [], c = [], missing = [], extra = []
    cdef bint in_edge, in_cloud
    for key in sorted(edge | cloud):
        in_edge = key in edge
        in_cloud = key in cloud
        if in_edge:
            e.append(key)
            if not in_cloud:
                extra.append(key)
        if in_cloud:
            c.append(key)
            if not in_edge:
                missing.append(key)
    return e, c, missing, extra
