"""The example task configs that ship inside the package (controlplane/catalog/example_tasks/,
one YAML file a task): `shadowplane tasks example NAME` prints one, the demo applies them
all. Installed from a wheel or a checkout alike, so a deployment needs no checkout."""

from __future__ import annotations

from pathlib import Path

# The folder of the example configs, inside the installed package.
FOLDER = Path(__file__).resolve().parent / "example_tasks"


def paths() -> list[Path]:
    """Every example config, by name."""
    return sorted(FOLDER.glob("*.yaml"))


def names() -> list[str]:
    """The examples' names (each is also the task name its config registers)."""
    return [path.stem for path in paths()]


def text(name: str) -> str:
    """One example config as written (comments kept); KeyError naming the examples there
    are when there is no such example."""
    for path in paths():
        if path.stem == name:
            return path.read_text(encoding="utf-8")
    raise KeyError(f"no example task {name!r}: the examples are {', '.join(names())}")
