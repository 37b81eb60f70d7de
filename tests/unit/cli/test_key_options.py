"""`--key` is declared twice, once per role, in cli/options.py: a signing key (private) and a
key a signature is checked against (public). Every verb's --key is one of them, with the
behaviour it had when each verb declared its own (must the path exist, no default)."""

import click

from appliance.cli import options
from tests.unit.cli.test_uniform import CLI_DIR, all_commands

SIGNING = "Private key file or key directory to sign "
VERIFYING = "Public key file or key directory "

# verb -> (role, must the path exist when parsed)
EXPECTED = {
    "image export": (SIGNING, True),
    "image push": (SIGNING, True),  # signs the published image's record
    "pull": (VERIFYING, False),  # `--key` without `--from` is refused by name first
    "run": (SIGNING, True),
    "sweep": (SIGNING, True),
    "bundle sign": (SIGNING, True),
    "bundle verify": (VERIFYING, True),
    "report": (VERIFYING, True),
    "evidence compare": (VERIFYING, True),
    "evidence draft": (VERIFYING, True),
    "repro run": (SIGNING, True),
}


def test_key_is_declared_once_per_role_in_options() -> None:
    declared = {path.name: path.read_text().count('"--key"') for path in sorted(CLI_DIR.glob("*.py"))}
    assert {name: n for name, n in declared.items() if n} == {"options.py": 2}


def test_every_verbs_key_is_one_of_the_two_with_its_old_behaviour() -> None:
    found = {}
    for name, command in all_commands():
        for param in command.params:
            if "--key" in getattr(param, "opts", []):
                assert isinstance(param, click.Option) and isinstance(param.type, click.Path), name
                assert param.name == "key" and param.default is None and not param.required, name
                assert param.envvar is None and param.opts == ["--key"], name
                assert param.help is not None
                role = SIGNING if param.help.startswith(SIGNING) else VERIFYING
                assert param.help.startswith(role), (name, param.help)
                found[name] = (role, param.type.exists)
    assert found == EXPECTED


def test_the_help_says_what_is_signed_and_which_key_is_the_default() -> None:
    def key_help(decorator: object) -> str:
        command = click.command()(decorator(lambda key: None))  # type: ignore[operator]
        return next(p.help for p in command.params if p.name == "key") or ""

    assert key_help(options.signing_key_option("the sidecar")) == (
        "Private key file or key directory to sign the sidecar with "
        "(default: the key from `appliance keys init`)."
    )
    assert key_help(options.signing_key_option("the bundle", made_on_first_use=True)) == (
        "Private key file or key directory to sign the bundle with "
        "(default: the key from `appliance keys init`, made and trusted on first use)."
    )
    assert key_help(options.verify_key_option("the bundle")) == (
        "Public key file or key directory the bundle must be signed with "
        "(default: any key in the trust store, as `appliance keys list` shows)."
    )
