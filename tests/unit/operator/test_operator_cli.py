"""`floodway operator`'s namespace scope: explicit (named namespaces, or all), names only, checked before it
connects to anything."""

import pytest
from floodway.operator.cli import app
from floodway.operator.controller.cli import watch_scope
from typer.testing import CliRunner


def test_watch_scope():
    assert watch_scope(["a", "b", "a"], False) == ["a", "b"]
    assert watch_scope(None, True) == []  # all namespaces


@pytest.mark.parametrize("namespaces, all_namespaces, message", [
    (None, False, "--all-namespaces"), (["a"], True, "exclude each other"), (["team-*"], False, "team-*"),
    (["Team"], False, "not patterns")])
def test_watch_scope_refuses(namespaces, all_namespaces, message):
    with pytest.raises(ValueError, match=message.replace("*", r"\*")):
        watch_scope(namespaces, all_namespaces)


def test_the_command_refuses_an_implicit_scope_before_connecting(tmp_path):
    missing = tmp_path / "no-such-kubeconfig"
    result = CliRunner().invoke(app, ["operator", "--kubeconfig", str(missing)])
    assert result.exit_code == 2 and "--all-namespaces" in result.output
    result = CliRunner().invoke(app, ["operator", "--kubeconfig", str(missing), "-n", "a", "-A"])
    assert result.exit_code == 2 and "exclude each other" in result.output
