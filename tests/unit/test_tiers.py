"""`-m unit`, `-m integration`, `-m cluster`, `-m node` and `-m e2e` partition the suite: tests/conftest.py gives
each test the marker of its folder, and only that one."""

import re
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
TIERS = ("unit", "integration", "cluster", "node", "e2e")
# One small file per tier: collecting the whole suite once per tier would cost minutes on a loaded 2-core machine.
SAMPLE = {"unit": "unit/test_procs.py", "integration": "integration/operator/test_up_bad_input.py",
          "cluster": "cluster/test_helm_chart.py", "node": "node/test_real_node.py", "e2e": "e2e/test_kind_minikube.py"}


def collected(*args: str) -> set[str]:
    done = subprocess.run([sys.executable, "-P", "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           *args, *(str(TESTS / f) for f in SAMPLE.values())],
                          capture_output=True, text=True, cwd=TESTS.parent, timeout=300)
    assert done.returncode in (0, 5), done.stdout[-3000:] + done.stderr[-3000:]  # 5: nothing selected
    return {line for line in done.stdout.splitlines() if "::" in line}


def test_every_test_file_lives_in_a_tier_folder_and_claims_no_tier_itself():
    files = sorted(TESTS.rglob("test_*.py"))
    assert files
    for path in files:
        assert path.relative_to(TESTS).parts[0] in TIERS, path
        assert not re.search(r"pytest\.mark\.(unit|integration|cluster|node|e2e)\b", path.read_text()), (
            f"{path}: its folder sets its tier (tests/conftest.py)")


def test_each_tier_marker_selects_exactly_its_folder():
    everything = collected()
    by_tier = {tier: collected("-m", tier) for tier in TIERS}
    for tier, ids in by_tier.items():
        assert ids, f"-m {tier} selected nothing"
        assert all(i.startswith(f"tests/{tier}/") for i in ids), (tier, ids)
        assert ids == {i for i in everything if i.startswith(f"tests/{tier}/")}, tier
    assert set().union(*by_tier.values()) == everything
    assert sum(map(len, by_tier.values())) == len(everything)  # no test in two tiers
