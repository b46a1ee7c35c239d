"""The compiled text reader (Cython), built where a C compiler exists.

Everything else is declared in pyproject.toml. The extensions are optional: where no
compiler (or no Cython) is found, `pip install .` installs the package without them and
Shadowplane runs the Python reader, which it logs at startup and exports on /metrics
(`shadowplane_native_reader 0`)."""

from __future__ import annotations

import os

from setuptools import Extension, setup

# controlplane/compare/native.py loads them.
MODULES = ("_counts", "_numbers", "_spans", "_mask", "_normal")


def extensions() -> list[Extension]:
    try:
        from Cython.Build import cythonize
    except ImportError:  # no Cython: the Python reader only
        return []
    built = cythonize(
        [
            Extension(
                f"controlplane.compare.{name}",
                [f"controlplane/compare/{name}.pyx"],
            )
            for name in MODULES
        ],
        compiler_directives={
            "language_level": "3",
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
        },
        quiet=True,
    )
    for extension in built:
        # Set here: cythonize() drops `optional` from the extensions it is given. A C
        # compiler that fails or is missing is then a warning, and the build goes on.
        extension.optional = True
    return built


# The modules compile side by side (about 10 s of a fresh install one after another).
setup(ext_modules=extensions(), options={"build_ext": {"parallel": os.cpu_count() or 1}})
