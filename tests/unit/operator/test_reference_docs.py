"""The docs site's reference pages (docs/reference/) are generated from the code; these tests fail when the
checked-in pages are stale, and check that the generator leaves out no field, rule, command or metric."""

import subprocess
import sys

import typer
from floodway.operator.crdgen.crd import build_crd
from floodway.operator.refdocs import files
from floodway.operator.refdocs.__main__ import main


def test_checked_in_reference_pages_match_the_code():
    stale = files.stale_paths()
    assert not stale, f"reference pages drifted; run `python -P -m floodway.operator.refdocs`: {stale}"


def test_write_then_check_round_trip(tmp_path):
    assert main(["--check", "--root", str(tmp_path)]) == 1
    assert main(["--root", str(tmp_path)]) == 0
    assert main(["--check", "--root", str(tmp_path)]) == 0
    (tmp_path / files.FOLDER / "cli.md").write_text("edited")
    assert files.stale_paths(tmp_path) == [tmp_path / files.FOLDER / "cli.md"]


def _objects(node: dict, path: str):
    """Every object of the schema with properties, by the path its page section is titled with."""
    if node.get("properties"):
        yield path, node
    for name, child in node.get("properties", {}).items():
        if child.get("type") == "array":
            yield from _objects(child.get("items", {}), f"{path}.{name}[]")
        else:
            yield from _objects(child, f"{path}.{name}")


def _section(page: str, title: str) -> str:
    return page.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_every_field_and_rule_of_the_crd_is_on_the_page():
    page = files.render_all()["inferenceservice.md"]
    root = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    objects = [*_objects(root["properties"]["spec"], "spec"), *_objects(root["properties"]["status"], "status")]
    assert len(objects) > 10
    for path, node in objects:
        section = _section(page, path)
        for name in node["properties"]:
            assert f"| `{name}` |" in section, f"{path}.{name} missing"
        for rule in node.get("x-kubernetes-validations", []):
            assert rule["message"] in section, f"{path}: rule {rule['message']!r} missing"
    assert "| `minimum 1` |" not in page  # constraints are rendered as words and values, not raw keys


def test_every_command_and_option_is_on_the_page():
    from floodway.operator.cli import app

    page = files.render_all()["cli.md"]
    root = typer.main.get_command(app)
    stack, seen = [(["floodway"], root)], 0
    while stack:
        path, cmd = stack.pop()
        subs = getattr(cmd, "commands", None)
        if subs is not None:
            stack += [(path + [n], c) for n, c in subs.items()]
            continue
        section = _section(page, " ".join(path))
        for param in cmd.params:
            names = [param.name.upper()] if param.param_type_name == "argument" else param.opts
            assert all(f"`{n}`" in section for n in names), f"{' '.join(path)}: {names} missing"
        seen += 1
    assert seen >= 10
    assert "`--max-num-seqs`" in _section(page, "floodway engine")  # the engine's flags, from EngineConfig


def test_every_metric_is_on_the_page():
    from floodway.operator.gateway.metrics import GatewayMetrics

    page = files.render_all()["metrics.md"]
    for family in GatewayMetrics().registry.collect():
        assert f"`{family.name}" in page
    for name in ("vllm:num_requests_running", "vllm:time_to_first_token_seconds", "vllm:request_success_total",
                 "vllm:cache_config_info", "floodway_prefill_tokens_per_second"):
        assert f"| `{name}` |" in page


def test_rendering_imports_no_torch():
    code = ("import sys; from floodway.operator.refdocs import files; files.render_all(); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-P", "-c", code], check=True)
