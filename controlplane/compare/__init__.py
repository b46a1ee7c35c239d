"""Reading values that came from outside: comparators (edge output against cloud output),
the text reader behind `text_conservation`, redaction, and JSON encoding.

The ground floor of the project: pure functions that import nothing else of it."""
