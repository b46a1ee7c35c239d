"""The Task page's parts: its cached loaders, what its buttons do, what each section shows
(plain functions on loaded data) and the sections' rendering."""
