# Shared by the compiled readers (included after _text.pxi, not imported): phone numbers,
# emails and URLs found natively, exactly as redaction.PHONE, redaction._Emails,
# redaction._Urls and redaction.find_spans find them, in time linear in the text.
# find_spans builds the list; span_init* and span_next walk the same spans one at a time
# (email_*, url_* and phone_end are the finders under them); each says its contract.

cdef enum:
    K_EMAIL = 1
    K_URL = 2

# A caller's "other" pattern: the end of its match starting exactly at i, with *kind set
# (callers use kinds >= 10); -1 when none. Its matches must be non-empty and short.
ctypedef Py_ssize_t (*match_at_t)(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i, int* kind) noexcept nogil

cdef enum:
    # Which non-ASCII characters `other` may start a match at (span_init_filtered).
    NON_ASCII_NEVER = 0
    NON_ASCII_ANY = 1
    NON_ASCII_DIGITS = 2  # \d: decimal digits of any script


from cpython.mem cimport PyMem_Realloc


# Where something stands in a text (ascending), in a growing buffer the reader frees.
cdef struct Positions:
    Py_ssize_t* data
    Py_ssize_t count
    Py_ssize_t cap


cdef int _push(Positions* p, Py_ssize_t i) except -1:
    cdef Py_ssize_t* grown
    cdef Py_ssize_t cap
    if p.count == p.cap:
        cap = max(2 * p.cap, 64)
        grown = <Py_ssize_t*>PyMem_Realloc(p.data, cap * sizeof(Py_ssize_t))
        if grown == NULL:
            raise MemoryError()
        p.data = grown
        p.cap = cap
    p.data[p.count] = i
    p.count += 1
    return 0


# --- PHONE ------------------------------------------------------------------------------
# Each branch is matched by hand with the regex's own backtracking order (greedy counts
# tried from the most down, optional parts tried present first), so the end is the one
# Python's `re` picks. The pattern is bounded (at most ~40 characters), so is the work.

# `\d` (re_digit), quicker on the characters of most texts: no decimal digit lies below
# U+0660 but ASCII's, nor between U+1C5A and U+A620 (CJK and its punctuation), nor from
# U+AC00 to the plane's end but the full-width ones (０-９, beside the full-width
# punctuation of Chinese text), in any Unicode version so far
# (tests/ingest/test_native_spans.py checks this build's table).
cdef inline bint nd_digit(Py_UCS4 c) noexcept nogil:
    if c < 0x660:
        return 48 <= c <= 57
    if 0x1C5A <= c < 0xA620:
        return False
    if 0xAC00 <= c < 0x10000:
        return 0xFF10 <= c <= 0xFF19
    return re_digit(c)


# [ ./\u200b-\u200d\u2060-]
cdef inline bint phone_sep(Py_UCS4 c) noexcept nogil:
    return c == 32 or c == 46 or c == 47 or c == 45 or (0x200B <= c <= 0x200D) or c == 0x2060


cdef inline bint _digit_at(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t p) noexcept nogil:
    return p < n and nd_digit(s[p])


cdef inline bint _sep_at(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t p) noexcept nogil:
    return p < n and phone_sep(s[p])


cdef inline Py_ssize_t _digits(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t p, Py_ssize_t most) noexcept nogil:
    """How many \\d (at most `most`) start at p."""
    cdef Py_ssize_t k = 0
    while k < most and p + k < n and nd_digit(s[p + k]):
        k += 1
    return k


cdef Py_ssize_t _intl_groups(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t p, int k) noexcept nogil:
    # (?:SEP?\d{2,4}){1,4}(?!\d), k iterations done
    cdef Py_ssize_t q, m, length, r
    cdef int opt
    if k < 4:
        for opt in range(2):
            if opt == 0:
                if not _sep_at(s, n, p):
                    continue
                q = p + 1
            else:
                q = p
            m = _digits(s, n, q, 4)
            length = m
            while length >= 2:
                r = _intl_groups(s, n, q + length, k + 1)
                if r >= 0:
                    return r
                length -= 1
    if k >= 1 and not _digit_at(s, n, p):
        return p
    return -1


cdef Py_ssize_t _intl_tail(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t p) noexcept nogil:
    # \d{1,4}(?:SEP?\d{2,4}){1,4}(?!\d)
    cdef Py_ssize_t length = _digits(s, n, p, 4), r
    while length >= 1:
        r = _intl_groups(s, n, p + length, 0)
        if r >= 0:
            return r
        length -= 1
    return -1


cdef Py_ssize_t _intl(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    # (?:\+|0(?<!\d0)0)\d{1,3}SEP?(?:\(\d{1,4}\)SEP?)?\d{1,4}(?:SEP?\d{2,4}){1,4}(?!\d)
    cdef Py_ssize_t p, a, p1, p2, b, q, p3, p4, r
    cdef int opt, opt2
    if s[i] == 43:  # +
        p = i + 1
    elif s[i] == 48 and not (i > 0 and nd_digit(s[i - 1])) and i + 1 < n and s[i + 1] == 48:
        p = i + 2
    else:
        return -1
    a = _digits(s, n, p, 3)
    while a >= 1:
        p1 = p + a
        for opt in range(2):
            if opt == 0:
                if not _sep_at(s, n, p1):
                    continue
                p2 = p1 + 1
            else:
                p2 = p1
            if p2 < n and s[p2] == 40:  # (
                b = _digits(s, n, p2 + 1, 4)
                while b >= 1:
                    q = p2 + 1 + b
                    if q < n and s[q] == 41:  # )
                        p3 = q + 1
                        for opt2 in range(2):
                            if opt2 == 0:
                                if not _sep_at(s, n, p3):
                                    continue
                                p4 = p3 + 1
                            else:
                                p4 = p3
                            r = _intl_tail(s, n, p4)
                            if r >= 0:
                                return r
                    b -= 1
            r = _intl_tail(s, n, p2)
            if r >= 0:
                return r
        a -= 1
    return -1


cdef Py_ssize_t _mobile(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    # 1(?<!\d1)[3-9]\d SEP? \d{4} SEP? \d{4} (?!\d)
    cdef Py_ssize_t p, q1, q2
    cdef int opt1, opt2
    if s[i] != 49 or (i > 0 and nd_digit(s[i - 1])):
        return -1
    if not (i + 1 < n and 51 <= s[i + 1] <= 57) or not _digit_at(s, n, i + 2):
        return -1
    p = i + 3
    for opt1 in range(2):
        if opt1 == 0:
            if not _sep_at(s, n, p):
                continue
            q1 = p + 1
        else:
            q1 = p
        if _digits(s, n, q1, 4) != 4:
            continue
        for opt2 in range(2):
            if opt2 == 0:
                if not _sep_at(s, n, q1 + 4):
                    continue
                q2 = q1 + 5
            else:
                q2 = q1 + 4
            if _digits(s, n, q2, 4) == 4 and not _digit_at(s, n, q2 + 4):
                return q2 + 4
    return -1


cdef Py_ssize_t _landline_tail(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t p) noexcept nogil:
    # SEP? \d{7,8} (?!\d)
    cdef Py_ssize_t q, length
    cdef int opt
    for opt in range(2):
        if opt == 0:
            if not _sep_at(s, n, p):
                continue
            q = p + 1
        else:
            q = p
        length = _digits(s, n, q, 8)
        while length >= 7:
            if not _digit_at(s, n, q + length):
                return q + length
            length -= 1
    return -1


cdef Py_ssize_t _landline(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    # (?:\(0\d{2,3}\)|0(?<!\d0)\d{2,3}) SEP? \d{7,8} (?!\d)
    cdef Py_ssize_t c, r
    if s[i] == 40 and i + 1 < n and s[i + 1] == 48:
        c = _digits(s, n, i + 2, 3)
        while c >= 2:
            if i + 2 + c < n and s[i + 2 + c] == 41:
                r = _landline_tail(s, n, i + 3 + c)
                if r >= 0:
                    return r
            c -= 1
    if s[i] == 48 and not (i > 0 and nd_digit(s[i - 1])):
        c = _digits(s, n, i + 1, 3)
        while c >= 2:
            r = _landline_tail(s, n, i + 1 + c)
            if r >= 0:
                return r
            c -= 1
    return -1


cdef Py_ssize_t _north_american_tail(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t p) noexcept nogil:
    # \d{3} SEP \d{4} (?!\d)
    if _digits(s, n, p, 3) == 3 and _sep_at(s, n, p + 3) and _digits(s, n, p + 4, 4) == 4:
        if not _digit_at(s, n, p + 8):
            return p + 8
    return -1


cdef Py_ssize_t _north_american(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    # (?:\(\d{3}\)SEP?|\d(?<!\d\d)\d{2}SEP)\d{3}SEP\d{4}(?!\d)
    cdef Py_ssize_t r
    if s[i] == 40 and _digits(s, n, i + 1, 3) == 3 and i + 4 < n and s[i + 4] == 41:
        if _sep_at(s, n, i + 5):
            r = _north_american_tail(s, n, i + 6)
            if r >= 0:
                return r
        r = _north_american_tail(s, n, i + 5)
        if r >= 0:
            return r
    if nd_digit(s[i]) and not (i > 0 and nd_digit(s[i - 1])):
        if _digits(s, n, i + 1, 2) == 2 and _sep_at(s, n, i + 3):
            return _north_american_tail(s, n, i + 4)
    return -1


# Where a PHONE match may start (for span_init_filtered): "+", "(" or a digit (of any
# script).
cdef const char* PHONE_FIRST = b"+(0123456789"
cdef int PHONE_NON_ASCII = NON_ASCII_DIGITS


cdef Py_ssize_t phone_end(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    """End of redaction.PHONE's match starting exactly at i (re.match at i, its lookbehinds
    reading before i), or -1."""
    cdef Py_UCS4 c
    cdef Py_ssize_t r
    if i >= n:
        return -1
    c = s[i]
    # Every branch starts with "+", "(" or a digit that no digit comes before.
    if c != 43 and c != 40 and (not nd_digit(c) or (i > 0 and nd_digit(s[i - 1]))):
        return -1
    r = _intl(s, n, i)
    if r >= 0:
        return r
    r = _mobile(s, n, i)
    if r >= 0:
        return r
    r = _landline(s, n, i)
    if r >= 0:
        return r
    return _north_american(s, n, i)


# --- emails (redaction._Emails) ------------------------------------------------------------

# redaction._EMAIL_LETTERS: Latin (accents too), Greek, Cyrillic.
cdef inline bint email_letter(Py_UCS4 c) noexcept nogil:  # redaction._EMAIL_LETTERS
    if c < 0x80:
        return (65 <= c <= 90) or (97 <= c <= 122)
    return (
        (0xC0 <= c <= 0xD6) or (0xD8 <= c <= 0xF6) or (0xF8 <= c <= 0x24F)
        or (0x370 <= c <= 0x4FF)
    )


cdef inline bint email_zero_width(Py_UCS4 c) noexcept nogil:
    return (0x200B <= c <= 0x200D) or c == 0x2060


# redaction._LABEL's characters.
cdef inline bint email_label(Py_UCS4 c) noexcept nogil:
    return email_letter(c) or (48 <= c <= 57) or c == 45 or email_zero_width(c)


# redaction._LOCAL_RUN's characters.
cdef inline bint email_local(Py_UCS4 c) noexcept nogil:
    return (
        email_letter(c) or (48 <= c <= 57) or c == 46 or c == 95 or c == 37 or c == 43
        or c == 45 or email_zero_width(c)
    )


cdef struct EmailFinder:
    const Py_UCS4* s
    Py_ssize_t n
    Py_ssize_t at  # the "@" under consideration, -1 when none is left
    Py_ssize_t end  # the end of its email: -2 not read yet, -1 none
    Py_ssize_t local  # the start of its local part's run
    const Py_ssize_t* ats  # when not NULL, where every "@" stands (ats[:n_ats], ascending)
    Py_ssize_t n_ats
    Py_ssize_t next_at  # the index in ats of the "@" under consideration


cdef inline Py_ssize_t _find_at(EmailFinder* f, Py_ssize_t k) noexcept nogil:
    # The first "@" at k or later, or -1.
    if f.ats != NULL:
        while f.next_at < f.n_ats:
            if f.ats[f.next_at] >= k:
                return f.ats[f.next_at]
            f.next_at += 1
        return -1
    while k < f.n:
        if f.s[k] == 64:
            return k
        k += 1
    return -1


cdef void email_init(EmailFinder* f, const Py_UCS4* s, Py_ssize_t n) noexcept nogil:
    email_init_ats(f, s, n, NULL, 0)


cdef void email_init_ats(
    EmailFinder* f, const Py_UCS4* s, Py_ssize_t n, const Py_ssize_t* ats, Py_ssize_t n_ats
) noexcept nogil:
    """email_init, given where every "@" stands (ascending; NULL: it looks for them)."""
    f.s = s
    f.n = n
    f.ats = ats
    f.n_ats = n_ats
    f.next_at = 0
    f.at = _find_at(f, 0)
    f.end = -2
    f.local = 0


cdef Py_ssize_t _domain_end(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t at) noexcept nogil:
    # _DOMAIN_RUN.match(text, at + 1), then _DOMAIN_END (.*\.[L]{2,}) within it.
    cdef Py_ssize_t p = at + 1, run_end, d, e
    if p >= n or not email_label(s[p]):
        return -1
    while p < n and email_label(s[p]):
        p += 1
    while p + 1 < n and s[p] == 46 and email_label(s[p + 1]):
        p += 1
        while p < n and email_label(s[p]):
            p += 1
    run_end = p
    d = run_end - 1
    while d > at:
        if s[d] == 46 and d + 2 < run_end and email_letter(s[d + 1]) and email_letter(s[d + 2]):
            e = d + 3
            while e < run_end and email_letter(s[e]):
                e += 1
            return e
        d -= 1
    return -1


cdef bint email_next(EmailFinder* f, Py_ssize_t pos, Py_ssize_t* start, Py_ssize_t* end) noexcept nogil:
    """_Emails.next: the first email a regex scan resuming at pos would match."""
    cdef Py_ssize_t at, k, begin
    while f.at != -1:
        at = f.at
        if at > pos:
            if f.end == -2:
                f.end = _domain_end(f.s, f.n, at)
                if f.end != -1:
                    k = at
                    while k > 0 and email_local(f.s[k - 1]):
                        k -= 1
                    f.local = k
            begin = f.local if f.local > pos else pos
            if f.end != -1 and begin < at:
                start[0] = begin
                end[0] = f.end
                return True
        f.at = _find_at(f, at + 1)
        f.end = -2
    return False


# --- URLs (redaction._Urls) ------------------------------------------------------------------

# redaction._URL_STOP: \s<>"'“”「」《》，。！？、
cdef inline bint url_stop(Py_UCS4 c) noexcept nogil:
    if c < 0x80:
        return c == 60 or c == 62 or c == 34 or c == 39 or re_space(c)
    return (
        c == 0x201C or c == 0x201D or c == 0x300C or c == 0x300D or c == 0x300A
        or c == 0x300B or c == 0xFF0C or c == 0x3002 or c == 0xFF01 or c == 0xFF1F
        or c == 0x3001 or re_space(c)
    )


# redaction._URL_TRAILING: .,;:!?)]
cdef inline bint url_trailing(Py_UCS4 c) noexcept nogil:
    return c == 46 or c == 44 or c == 59 or c == 58 or c == 33 or c == 63 or c == 41 or c == 93


cdef struct UrlFinder:
    const Py_UCS4* s
    Py_ssize_t n
    Py_ssize_t found_start  # the last URL returned, -1 for none
    Py_ssize_t found_end
    Py_ssize_t searched  # no URL starts before this but the one found
    Py_ssize_t run_end  # the end of the last run read, and of the URL in it
    Py_ssize_t url_end


cdef void url_init(UrlFinder* f, const Py_UCS4* s, Py_ssize_t n) noexcept nogil:
    f.s = s
    f.n = n
    f.found_start = -1
    f.found_end = -1
    f.searched = 0
    f.run_end = -1
    f.url_end = -1


cdef inline Py_ssize_t _url_start_end(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t k) noexcept nogil:
    # The end of https?://|www\. matched at k, or -1.
    cdef Py_UCS4 c = s[k]
    if c == 104:  # h
        if k + 7 <= n and s[k + 1] == 116 and s[k + 2] == 116 and s[k + 3] == 112:
            if s[k + 4] == 115:
                if k + 8 <= n and s[k + 5] == 58 and s[k + 6] == 47 and s[k + 7] == 47:
                    return k + 8
            elif s[k + 4] == 58 and s[k + 5] == 47 and s[k + 6] == 47:
                return k + 7
    elif c == 119:  # w
        if k + 4 <= n and s[k + 1] == 119 and s[k + 2] == 119 and s[k + 3] == 46:
            return k + 4
    return -1


cdef bint url_next(UrlFinder* f, Py_ssize_t pos, Py_ssize_t* start, Py_ssize_t* end) noexcept nogil:
    """_Urls.next: the first URL starting at pos or later."""
    cdef Py_ssize_t k, scheme_end, p
    if f.found_start >= 0 and f.found_start >= pos:
        start[0] = f.found_start
        end[0] = f.found_end
        return True
    k = pos if pos > f.searched else f.searched
    while k < f.n:
        scheme_end = _url_start_end(f.s, f.n, k)
        if scheme_end >= 0:
            if k >= f.run_end:
                p = k
                while p < f.n and not url_stop(f.s[p]):
                    p += 1
                f.run_end = p
                while p > k and url_trailing(f.s[p - 1]):
                    p -= 1
                f.url_end = p
            # One character after the scheme, and a last one not trailing punctuation.
            if f.url_end >= scheme_end + 2:
                f.found_start = k
                f.found_end = f.url_end
                f.searched = k + 1
                start[0] = k
                end[0] = f.url_end
                return True
        k += 1
    f.found_start = -1
    f.searched = f.n + 1
    return False


# --- find_spans (redaction.find_spans) ---------------------------------------------------------


cdef inline Py_ssize_t _other_search(
    match_at_t other, const Py_UCS4* s, Py_ssize_t n, Py_ssize_t pos, Py_ssize_t* end, int* kind,
    const unsigned char* first, int non_ascii
) noexcept nogil:
    # The start of `other`'s leftmost match at pos or later (its end and kind set), or -1;
    # `other` is asked only where its first character may stand.
    cdef Py_ssize_t i = pos, e
    cdef Py_UCS4 c
    while i < n:
        c = s[i]
        if c < 128:
            if not first[c]:
                i += 1
                continue
        elif non_ascii == NON_ASCII_NEVER or (non_ascii == NON_ASCII_DIGITS and not nd_digit(c)):
            i += 1
            continue
        e = other(s, n, i, kind)
        if e >= 0:
            end[0] = e
            return i
        i += 1
    return -1


cdef struct SpanFinder:
    const Py_UCS4* s
    Py_ssize_t n
    match_at_t other
    EmailFinder ef
    UrlFinder uf
    bint urls
    bint email_ok  # an email lies at es:ee
    Py_ssize_t es
    Py_ssize_t ee
    Py_ssize_t os  # `other`'s match at os:oe (okind), -1 for none
    Py_ssize_t oe
    int okind
    Py_ssize_t pos
    unsigned char first[128]  # the ASCII characters `other` may start a match at
    int non_ascii  # and the others: NON_ASCII_NEVER, NON_ASCII_ANY or NON_ASCII_DIGITS
    const Py_ssize_t* starts  # or, when not NULL, the only places it may start at
    Py_ssize_t count
    Py_ssize_t next_start  # starts[:next_start] lie behind the scan
    const Py_ssize_t* ats  # when not NULL, where every "@" stands
    Py_ssize_t n_ats


cdef void span_init(
    SpanFinder* f, const Py_UCS4* s, Py_ssize_t n, match_at_t other, bint emails, bint urls
) noexcept nogil:
    span_init_filtered(f, s, n, other, emails, urls, NULL, NON_ASCII_ANY)


cdef void span_init_filtered(
    SpanFinder* f, const Py_UCS4* s, Py_ssize_t n, match_at_t other, bint emails, bint urls,
    const char* first, int non_ascii
) noexcept nogil:
    """span_init, asking `other` only at the ASCII characters in `first` (NULL: all) and at
    non-ASCII ones per `non_ascii` (NON_ASCII_NEVER, NON_ASCII_ANY, NON_ASCII_DIGITS)."""
    cdef int k
    for k in range(128):
        f.first[k] = first == NULL
    if first != NULL:
        k = 0
        while first[k] != 0:
            f.first[<unsigned char>first[k] & 127] = 1
            k += 1
    f.non_ascii = non_ascii
    f.starts = NULL
    f.count = 0
    f.next_start = 0
    f.ats = NULL
    f.n_ats = 0
    _span_begin(f, s, n, other, emails, urls)


cdef void span_init_starts(
    SpanFinder* f, const Py_UCS4* s, Py_ssize_t n, match_at_t other, bint emails, bint urls,
    const Py_ssize_t* starts, Py_ssize_t count
) noexcept nogil:
    """span_init, asking `other` only at starts[:count] (ascending, every place it may match
    at; the array must outlive the finder)."""
    span_init_hinted(f, s, n, other, emails, urls, starts, count, NULL, 0)


cdef void span_init_hinted(
    SpanFinder* f, const Py_UCS4* s, Py_ssize_t n, match_at_t other, bint emails, bint urls,
    const Py_ssize_t* starts, Py_ssize_t count, const Py_ssize_t* ats, Py_ssize_t n_ats
) noexcept nogil:
    """span_init_starts, and ats[:n_ats] where every "@" stands (ascending), so the email
    finder need not look for them."""
    f.starts = starts
    f.count = count
    f.next_start = 0
    f.ats = ats
    f.n_ats = n_ats
    _span_begin(f, s, n, other, emails, urls)


cdef Py_ssize_t _other_next(SpanFinder* f, Py_ssize_t pos) noexcept nogil:
    # `other`'s leftmost match at pos or later (f.oe, f.okind set): its start, or -1.
    cdef Py_ssize_t i, e
    if f.starts == NULL:
        return _other_search(f.other, f.s, f.n, pos, &f.oe, &f.okind, f.first, f.non_ascii)
    while f.next_start < f.count:
        i = f.starts[f.next_start]
        if i >= pos:
            e = f.other(f.s, f.n, i, &f.okind)
            if e >= 0:
                f.oe = e
                return i
        f.next_start += 1
    return -1


cdef void _span_begin(
    SpanFinder* f, const Py_UCS4* s, Py_ssize_t n, match_at_t other, bint emails, bint urls
) noexcept nogil:
    f.s = s
    f.n = n
    f.other = other
    f.urls = urls
    f.email_ok = False
    f.es = 0
    f.ee = 0
    f.os = -1
    f.oe = 0
    f.okind = 0
    f.pos = 0
    if emails:
        email_init_ats(&f.ef, s, n, f.ats, f.n_ats)
        f.email_ok = email_next(&f.ef, 0, &f.es, &f.ee)
    if urls:
        url_init(&f.uf, s, n)
    if other != NULL:
        f.os = _other_next(f, 0)


cdef bint span_next(SpanFinder* f, int* kind, Py_ssize_t* start, Py_ssize_t* end) noexcept nogil:
    """The next (kind, start, end) redaction.find_spans yields, without building Python
    objects; False when none is left."""
    cdef bint url_ok = False
    cdef Py_ssize_t us = 0, ue = 0, other_start, pos = f.pos
    # Each finder only moves forward: what it found is kept while it lies ahead.
    if f.email_ok and f.es < pos:
        f.email_ok = email_next(&f.ef, pos, &f.es, &f.ee)
    if f.urls:
        url_ok = url_next(&f.uf, pos, &us, &ue)
    if f.os >= 0 and f.os < pos:
        f.os = _other_next(f, pos)
    other_start = f.os if f.os >= 0 else f.n + 1
    if f.email_ok and (not url_ok or f.es <= us) and f.es <= other_start:
        kind[0] = K_EMAIL
        start[0] = f.es
        end[0] = f.ee
    elif url_ok and us <= other_start:
        kind[0] = K_URL
        start[0] = us
        end[0] = ue
    elif f.os >= 0:
        kind[0] = f.okind
        start[0] = f.os
        end[0] = f.oe
    else:
        return False
    f.pos = end[0]
    return True


cdef list find_spans(const Py_UCS4* s, Py_ssize_t n, match_at_t other, bint emails, bint urls):
    """[(kind, start, end), ...]: what redaction.find_spans yields, in order; kind K_EMAIL
    (1), K_URL (2) or what `other` set, and `other` may be NULL (no pattern)."""
    cdef SpanFinder f
    cdef int kind
    cdef Py_ssize_t start, end
    cdef list out = []
    span_init(&f, s, n, other, emails, urls)
    while span_next(&f, &kind, &start, &end):
        out.append((kind, start, end))
    return out
