from appliance.release.notices import render, runtime_closure, runtime_requirements
from tests.conftest import REPO


def test_third_party_notices_are_current() -> None:
    current = (REPO / "THIRD_PARTY_NOTICES.md").read_text()
    assert current == render(REPO), "THIRD_PARTY_NOTICES.md is stale: run `make notices` and commit it"


def test_notices_cover_every_direct_dependency_and_llama_cpp() -> None:
    text = render(REPO)
    closure = runtime_closure(runtime_requirements(REPO / "pyproject.toml"))
    for req in runtime_requirements(REPO / "pyproject.toml"):
        name = req.name.lower().replace("_", "-")
        assert name in closure
        assert f"| {name} |" in text
    assert "Copyright (c) 2023-2026 The ggml authors" in text
    assert len(closure) > len(runtime_requirements(REPO / "pyproject.toml"))  # transitive ones too
