"""`make mutation`'s configuration stays in step with the code: the modules it mutates and the
tests it runs exist, and every mutant tests/mutation/equivalent.txt lists (with its reason)
names a function of one of those modules. CI does not run the mutation testing itself."""

import ast
import re
import tomllib

from tests.conftest import REPO
from tests.mutation.score import EQUIVALENT, equivalents, modules

CONFIG = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"]
MUTANT = re.compile(r"^(?P<module>[\w.]+?)\.x(?:ǁ(?P<cls>\w+)ǁ|_)(?P<func>\w+?)__mutmut_\d+$")


def test_the_mutated_modules_and_the_selected_tests_exist() -> None:
    assert modules() and all((REPO / m).is_file() for m in modules())
    for selected in CONFIG["pytest_add_cli_args_test_selection"]:  # a folder, a file or path::test
        path, _, test = selected.partition("::")
        assert (REPO / path).exists(), selected
        assert not test or f"def {test}(" in (REPO / path).read_text(), selected
    assert "mutants/" in (REPO / ".gitignore").read_text()


def _functions(module: str) -> set[str]:
    tree = ast.parse((REPO / module).read_text())
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names |= {f"{node.name}.{f.name}" for f in node.body if isinstance(f, ast.FunctionDef)}
    return names


def test_every_listed_equivalent_names_a_function_of_a_mutated_module() -> None:
    by_dotted = {m.removesuffix(".py").replace("/", "."): m for m in modules()}
    for name, reason in equivalents().items():
        match = MUTANT.match(name)
        assert match, f"{EQUIVALENT.name}: {name} is not a mutmut mutant name"
        module = by_dotted.get(match["module"])
        assert module, f"{EQUIVALENT.name}: {name} is not in a mutated module"
        func = f"{match['cls']}.{match['func']}" if match["cls"] else match["func"]
        assert func in _functions(module), f"{EQUIVALENT.name}: {name}: no function {func} in {module}"
        assert len(reason) >= 10, f"{EQUIVALENT.name}: {name}: say why it is equivalent"
