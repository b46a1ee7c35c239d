# Shared by the compiled readers (included, not imported): a text's code points in one
# buffer, and the character classes Python's `re` and str methods use, so a native reader
# decides each character exactly as the Python reader's patterns do.
from cpython.mem cimport PyMem_Free


cdef extern from "Python.h":
    Py_UCS4* PyUnicode_AsUCS4Copy(object text) except NULL
    # CPython's own character classes (what `re` and the str methods call), declared
    # here without the GIL so the readers' inner loops may run without it.
    bint Py_UNICODE_ISALNUM(Py_UCS4 ch) nogil
    bint Py_UNICODE_ISALPHA(Py_UCS4 ch) nogil
    bint Py_UNICODE_ISDECIMAL(Py_UCS4 ch) nogil
    bint Py_UNICODE_ISDIGIT(Py_UCS4 ch) nogil
    bint Py_UNICODE_ISLOWER(Py_UCS4 ch) nogil
    bint Py_UNICODE_ISSPACE(Py_UCS4 ch) nogil
    bint Py_UNICODE_ISUPPER(Py_UCS4 ch) nogil
    int Py_UNICODE_TODECIMAL(Py_UCS4 ch) nogil


# The one-call reader (_spans.read) reaches the counts and number readers of _counts and
# _numbers by address (each module exports its function in a capsule of this name): one
# copy of the text's code points serves all three.
ctypedef tuple (*counts_of_t)(const Py_UCS4* buffer, Py_ssize_t n)
ctypedef object (*numbers_of_t)(Py_UCS4* buffer, Py_ssize_t n, bint ascii)
cdef const char* COUNTS_OF = b"controlplane.compare._counts.counts_of"
cdef const char* NUMBERS_OF = b"controlplane.compare._numbers.numbers_of"


cdef inline Py_UCS4* code_points(str text) except NULL:
    """A copy of the text's code points (free it with PyMem_Free); len(text) of them."""
    return PyUnicode_AsUCS4Copy(text)


# `\d` in a str pattern: a decimal digit of any script (category Nd).
cdef inline bint re_digit(Py_UCS4 c) noexcept nogil:
    return Py_UNICODE_ISDECIMAL(c)


# `\s`: str.isspace().
cdef inline bint re_space(Py_UCS4 c) noexcept nogil:
    return Py_UNICODE_ISSPACE(c)


# `\w`: str.isalnum() or "_" (what `\b` reads too).
cdef inline bint re_word(Py_UCS4 c) noexcept nogil:
    return c == 95 or Py_UNICODE_ISALNUM(c)


# `\b` between s[i - 1] and s[i].
cdef inline bint re_boundary(const Py_UCS4* s, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    cdef bint before = i > 0 and re_word(s[i - 1])
    cdef bint after = i < n and re_word(s[i])
    return before != after


cdef inline bint ascii_letter(Py_UCS4 c) noexcept nogil:
    return (65 <= c <= 90) or (97 <= c <= 122)


cdef inline bint ascii_digit(Py_UCS4 c) noexcept nogil:
    return 48 <= c <= 57
