"""`floodway bench classes` (operator/bench/class_targets.py): issue 40's targets judged from the summaries per class
and tenant of the abusive run and the fair run."""

from floodway.operator.bench.class_targets import HEADER, judge, table, tally
from floodway.operator.simulator.report import GroupSummary


def group(name, attainment=1.0, busiest=50, overflowed=0, refused=0, rejected=0):
    return GroupSummary(name, 1000, 1000 - refused, busiest, attainment, overflowed, refused, rejected)


def runs(t1=1.0, t5_busiest=190, t2_refused=0, interactive=1.0, batch_rejected=0):
    """(abusive, fair) summaries: classes, then tenants t1..t5 (t5 refused past its limit in the abusive run)."""
    classes = [group("class interactive", interactive, overflowed=40), group("class standard", 0.999),
               group("class batch", 0.97, rejected=batch_rejected)]
    abusive = classes + [group("tenant t1", t1), group("tenant t2", 0.996, refused=t2_refused),
                         group("tenant t3"), group("tenant t4"), group("tenant t5", 0.99, t5_busiest, refused=1800)]
    fair = classes + [group(f"tenant t{i}", 1.0 if i != 2 else 0.997) for i in range(1, 6)]
    return abusive, fair


def test_a_row_meeting_every_target_says_yes_with_each_figure():
    v = judge("mooncake-2x, seed 0", *runs(), limit=99, abuser="t5")
    assert v.misses() == []
    assert v.cells == ("yes, 100.00%", "yes, 99.90%", "yes: 0 rejected, 0 overflowed",
                       "yes: 1800 refused, at most 190 a minute (bound 198); t1-t4 never refused",
                       "yes: -0.10 at worst")


def test_each_miss_says_no_with_its_figure_and_who():
    v = judge("x, seed 1", *runs(t1=0.9933, interactive=0.994, batch_rejected=2), limit=99, abuser="t5")
    assert v.misses() == ["interactive >= 99.5%", "batch: none lost", "others within 0.5 points"]
    assert v.cells[0] == "no, 99.40%" and v.cells[2] == "no: 2 rejected, 0 overflowed"
    assert v.cells[4] == "no: -0.67 at worst (t1)"
    held = judge("x, seed 2", *runs(t5_busiest=199), limit=99, abuser="t5")
    assert held.misses() == ["t5 held to its limit"] and "at most 199 a minute (bound 198)" in held.cells[3]
    refused = judge("x, seed 3", *runs(t2_refused=3), limit=99, abuser="t5")
    assert refused.misses() == ["t5 held to its limit"] and refused.cells[3].endswith("; t2 3 refused")


def test_the_table_has_the_targets_columns_and_the_tally_names_the_misses():
    ok, bad = judge("a, seed 0", *runs(), 99, "t5"), judge("b, seed 4", *runs(t1=0.99), 99, "t5")
    text = table([ok, bad])
    assert text.splitlines()[0].split("|")[1].strip() == HEADER[0] and len(text.splitlines()) == 4
    assert "| a, seed 0 " in text and "no: -1.00 at worst (t1)" in text
    assert tally([ok, bad]) == (
        "every target: 1 of 2 rows (interactive >= 99.5% 2, standard >= 99% 2, batch: none lost 2, t5 held to its "
        "limit 2, others within 0.5 points 1); misses: b, seed 4: others within 0.5 points")
