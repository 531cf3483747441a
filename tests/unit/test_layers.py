"""The layer map of `codeplay_lightning/__init__.py` holds: every import in the package, at module level or inside a
function, goes from a room to its own room or to a room on a lower floor of the map."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "codeplay_lightning"
MAP_TITLE = "Layers, each importing only from the ones below it:"


def floors(docstring: str) -> dict[str, int]:
    """Each room of the map (`setter`, `devices`, ...) and its floor, 0 at the top."""
    block = docstring.split(MAP_TITLE)[1].strip("\n").split("\n\n")[0]
    rooms = {}
    for floor, line in enumerate(block.splitlines()):
        names = line.strip().split("  ")[0]
        rooms |= {name.strip().rstrip("/"): floor for name in names.split(",")}
    return rooms


def imported_rooms(source: str) -> set[str]:
    """The rooms of `codeplay_lightning` that `source` imports from, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {module.split(".")[1] for module in modules if module.startswith("codeplay_lightning.")}
    return found


def crossings(package: Path) -> list[str]:
    """Every import that goes up the map or sideways to another room of the same floor, or names a room the map
    does not have, as `room -> room`."""
    rooms = floors(ast.get_docstring(ast.parse((package / "__init__.py").read_text())))
    wrong = set()
    for path in package.rglob("*.py"):
        parts = path.relative_to(package).with_suffix("").parts
        if parts == ("__init__",):
            continue
        room = parts[0]
        for other in imported_rooms(path.read_text()) - {room}:
            if room not in rooms or other not in rooms or rooms[other] <= rooms[room]:
                wrong.add(f"{room} -> {other}")
    return sorted(wrong)


def test_every_import_goes_down_the_layer_map():
    assert crossings(PACKAGE) == []


@pytest.mark.parametrize(
    ("room", "source", "crossing"),
    [
        ("rewards", "from codeplay_lightning.setter import SetterPPOModule", "rewards -> setter"),
        ("ppo", "def f():\n    import codeplay_lightning.models.head\n", "ppo -> models"),  # inside a function
        ("solver", "from codeplay_lightning.cwm import plan", "solver -> cwm"),  # sideways on one floor
        ("config", "from codeplay_lightning.nowhere import x", "config -> nowhere"),  # a room the map lacks
    ],
)
def test_an_import_up_or_across_the_map_is_caught(tmp_path, room, source, crossing):
    copy = tmp_path / "codeplay_lightning"
    copy.mkdir()
    (copy / "__init__.py").write_text((PACKAGE / "__init__.py").read_text())
    (copy / room).mkdir()
    (copy / room / "extra.py").write_text(source)
    assert crossings(copy) == [crossing]
