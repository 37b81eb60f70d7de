"""The planted bugs of `make plant-bugs` (tests/mutation/plants.py) stay in step with the code:
each plant's original line occurs exactly once in its file, its replacement changes that line,
and each test it names exists. A plant whose line moved fails here, not silently later."""

import ast

import pytest

from tests.conftest import REPO
from tests.mutation.plants import PLANTS, Plant, planted_text


@pytest.mark.parametrize("plant", PLANTS, ids=[p.name for p in PLANTS])
def test_each_plant_applies_to_exactly_one_line(plant: Plant) -> None:
    text = (REPO / plant.file).read_text()
    assert text.split("\n").count(plant.original) == 1
    planted = planted_text(plant, text)
    assert (
        planted != text
        and planted.split("\n").count(plant.replacement) == text.split("\n").count(plant.replacement) + 1
    )
    ast.parse(planted)  # a plant is a bug, not a syntax error (that would not be a test failure)


@pytest.mark.parametrize("plant", PLANTS, ids=[p.name for p in PLANTS])
def test_each_plants_tests_exist(plant: Plant) -> None:
    assert plant.tests
    for node in plant.tests:
        file, _, function = node.partition("::")
        assert (REPO / file).is_file(), node
        if function:
            names = {
                n.name
                for n in ast.walk(ast.parse((REPO / file).read_text()))
                if isinstance(n, ast.FunctionDef)
            }
            assert function in names, node


def test_a_plant_whose_line_is_not_there_once_is_refused() -> None:
    plant = PLANTS[0]
    with pytest.raises(
        ValueError, match=r"^appliance/attest/verify.py: the line of plant .* occurs 0 times, not once$"
    ):
        planted_text(plant, "nothing here\n")
    with pytest.raises(ValueError, match=r"occurs 2 times, not once$"):
        planted_text(plant, f"{plant.original}\n{plant.original}\n")


def test_the_plants_are_the_ten_the_issue_names() -> None:
    assert len(PLANTS) == 10 and len({p.name for p in PLANTS}) == 10
