"""Every `pytest.raises` on one of the project's documented errors (appliance.core.errors)
names the message it expects with `match=`: a test that accepts any ConfigError passes on
the wrong refusal too."""

import ast
import inspect

from appliance.core import errors
from tests.conftest import REPO

DOCUMENTED = {
    name for name, value in vars(errors).items() if inspect.isclass(value) and issubclass(value, Exception)
}


def _raises_without_match(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "raises"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "pytest"
            and node.args
        ):
            continue
        expected = node.args[0]
        names = expected.elts if isinstance(expected, ast.Tuple) else [expected]
        documented = any(isinstance(n, ast.Name) and n.id in DOCUMENTED for n in names)
        if documented and not any(k.arg == "match" for k in node.keywords):
            lines.append(node.lineno)
    return lines


def test_the_documented_errors_are_found() -> None:
    assert {"ApplianceError", "ConfigError", "IntegrityError"} <= DOCUMENTED


def test_every_raises_on_a_documented_error_has_a_match() -> None:
    missing = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        for line in _raises_without_match(ast.parse(path.read_text(), str(path))):
            missing.append(f"{path.relative_to(REPO)}:{line}")
    assert missing == []


def test_the_check_sees_a_bare_raises() -> None:
    tree = ast.parse(
        "with pytest.raises(ConfigError):\n    f()\nwith pytest.raises((OSError, IntegrityError)):\n    g()\n"
    )
    assert _raises_without_match(tree) == [1, 3]
    assert _raises_without_match(ast.parse("pytest.raises(ConfigError, match='x')")) == []
