"""CITATION.cff validates against the Citation File Format schema and matches the package."""

import json
import tomllib

import pytest
import yaml
from cffconvert import Citation
from jsonschema.exceptions import ValidationError

from tests.conftest import REPO


def test_citation_cff_validates() -> None:
    Citation((REPO / "CITATION.cff").read_text()).validate()


def test_citation_matches_the_package_and_the_pin() -> None:
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert cff["version"] == project["version"]
    assert cff["license"] == project["license"] == "MIT"
    lock_commit = json.loads((REPO / "engine/llama.cpp.lock.json").read_text())["upstream"]["commit"]
    assert [ref["commit"] for ref in cff["references"] if ref["title"] == "llama.cpp"] == [lock_commit]


def test_an_invalid_citation_is_refused() -> None:
    broken = (REPO / "CITATION.cff").read_text().replace("authors:", "writers:", 1)
    with pytest.raises(ValidationError, match="authors"):
        Citation(broken).validate()
