import pytest
from floodway.operator.simulator.report import Summary
from floodway.operator.simulator.sweep import Row, render


def summary(name, attainment, hours, overflow=0.0):
    return Summary(name, 100, attainment, 1.0, 0.1, 0.4, hours, overflow, 0, 0)


def test_a_row_names_each_target_it_misses():
    keda = summary("keda", 0.90, 3.0)
    ok = Row("spiky", 0, 100, summary("ours", 0.995, 2.0, 0.04), 1.8, {"keda": keda})
    assert ok.misses() == [] and render(ok).endswith("| yes |")
    bad = Row("spiky", 1, 100, summary("ours", 0.98, 2.5, 0.08), 2.0, {"keda": keda, "hpa": summary("hpa", 0.7, 1.0)})
    assert bad.misses() == ["attainment 98.00%", "overflow 8.0%", "replica-hours vs bound", "vs hpa"]
    assert Row("x", 0, 1, summary("ours", 1.0, 1.0), None, {}).misses() == ["replica-hours vs bound"]  # no bound
    long = Summary("ours", 100, 0.995, 1.0, 0.1, 0.4, 2.0, 0.04, 0, 0, overflow_token_share=0.15)
    assert Row("long-context", 0, 100, long, 1.8, {}).misses() == ["tokens overflowed 15.0%"]  # long prompts spend it


def test_the_static_pool_within_budget_is_the_largest_the_bound_factor_pays_for():
    from floodway.operator.simulator.config import SimConfig
    from floodway.operator.simulator.replica import ReplicaProfile
    from floodway.operator.simulator.sweep import static_within_budget
    from floodway.operator.simulator.traces import steps

    tr = steps([2, 8, 2], step_s=180, seed=3)
    cfg = SimConfig(profile=ReplicaProfile(max_num_seqs=16), cold_start_s=60.0)
    hours_each = tr[-1].arrival_s / 3600.0
    n, s = static_within_budget(tr, cfg, 3.1 * hours_each)  # 1.15 x 3.1 = 3.565 replicas' worth
    assert n == 3 and s.replica_hours == pytest.approx(3 * hours_each)
    assert static_within_budget(tr, cfg, 0.5 * hours_each) is None and static_within_budget(tr, cfg, None) is None
    row = Row("steps", 0, len(tr), s, 3.1 * hours_each, {}, (n, s))
    assert f"| 3: {s.attainment:.1%} / {s.overflow_share:.1%} |" in render(row)



def test_a_baseline_target_no_policy_can_meet_with_the_others_is_named_jointly_infeasible():
    from floodway.operator.simulator.sweep import tally

    ours = summary("ours", 0.996, 1.6, 0.03)
    cheap = summary("kpa", 0.66, 0.61)  # fewer hours than any schedule meeting 99% with <= 5% overflow
    perfect = summary("hpa", 1.0, 3.0)  # no schedule reaches 100% within 1.15 x the bound (1.76 h)
    fair = summary("keda", 0.999, 1.7)  # a schedule reaches 99.9% on 1.70 h: ours just misses it
    reach = ((0.991, 1.53), (0.999, 1.70), (0.9995, 2.5))  # the bound's schedules with <= 5% overflow
    row = Row("spiky", 2, 100, ours, 1.53, {"hpa": perfect, "keda": fair, "kpa": cheap}, None, reach)
    assert row.misses() == ["vs hpa", "vs keda", "vs kpa"]
    assert row.infeasible() == {"vs hpa": "no schedule reaches hpa's 100.00% on <= 1.76 h",
                                "vs kpa": "kpa 0.61 h < bound 1.53 h"}
    assert row.verdict() == ("no: vs hpa (jointly infeasible: no schedule reaches hpa's 100.00% on "
                             "<= 1.76 h), vs keda, vs kpa (jointly infeasible: kpa 0.61 h < bound 1.53 h)")
    assert row.dominated_by() == []
    # The schedule that reaches 99.95% costs 2.5 h: past 1.15 x the bound, so it does not make hpa's target feasible.
    assert "vs hpa" in Row("spiky", 2, 100, ours, 1.53, {"hpa": summary("hpa", 0.9995, 3.0)}, None,
                           reach).infeasible()
    # Without the schedules' results only the bound tells.
    assert Row("spiky", 2, 100, ours, 1.53, {"hpa": perfect, "kpa": cheap}).infeasible() == \
        {"vs kpa": "kpa 0.61 h < bound 1.53 h"}
    assert Row("x", 0, 1, ours, None, {"kpa": cheap}, None, reach).infeasible() == {}  # no bound: nothing to tell
    only_infeasible = Row("spiky", 3, 100, ours, 1.53, {"hpa": perfect, "kpa": cheap}, None, reach)
    met = Row("long-output", 0, 100, summary("ours", 1.0, 1.0), 1.0, {"hpa": summary("hpa", 1.0, 3.5)}, None,
              ((1.0, 1.0),))
    assert met.misses() == [] and met.infeasible() == {} and met.verdict() == "yes"  # a tie at 100% is met
    tie = Row("long-output", 0, 100, summary("ours", 1.0, 1.0), 1.0, {"kpa": summary("kpa", 1.0, 1.0)})
    assert tie.dominated_by() == [] and tie.verdict() == "yes"  # the same point is no better
    dominated = Row("diurnal", 0, 100, summary("ours", 0.99, 0.57), 0.5, {"kpa": summary("kpa", 0.995, 0.55)}, None,
                    ((0.995, 0.55),))
    assert dominated.dominated_by() == ["kpa"] and dominated.verdict() == "no: vs kpa, Pareto-dominated by kpa"
    lines = tally([row, only_infeasible, met, dominated]).splitlines()
    assert lines[0] == "every target: 1 of 4 rows (long-output 0)"
    assert lines[1] == "every jointly feasible target: 2 of 4 rows (spiky 3, long-output 0)"
    assert lines[2] == "a target jointly infeasible: 2 of 4 rows (spiky 2: vs hpa, vs kpa; spiky 3: vs hpa, vs kpa)"
    assert lines[3] == "a baseline Pareto-better than ours: 1 of 4 rows (diurnal 0)"
    # A target no bound schedule reaches that ours meets anyway is named as met.
    beaten = Row("mooncake-2x", 1, 100, summary("ours", 0.996, 1.1), 1.0, {"hpa": summary("hpa", 0.995, 3.0)}, None,
                 ((0.99, 1.0),))
    assert beaten.misses() == [] and list(beaten.infeasible()) == ["vs hpa"]
    assert tally([beaten]).splitlines()[2] == "a target jointly infeasible: 1 of 1 rows (mooncake-2x 1: vs hpa (met))"


def test_a_miss_of_the_overflow_or_the_bound_says_what_reacting_to_the_past_needs_for_both():
    from floodway.operator.simulator.sweep import tally

    ours = summary("ours", 0.996, 1.67, 0.071)
    # The best reactive schedule meets 99% with <= 5% overflow on 1.5 h, 1.28x the bound: past 1.15x.
    hard = Row("spiky", 4, 100, ours, 1.17, {}, None, (), 1.5)
    assert hard.reacting_misses()
    assert hard.verdict() == ("no: overflow 7.1% (reacting to the past, both need 1.28x), replica-hours vs bound "
                              "(reacting to the past, both need 1.28x)")
    # Where a reactive schedule meets both within 1.15x, ours could have too.
    easy = Row("azure-4x", 0, 100, summary("ours", 0.999, 0.97, 0.011), 0.73, {}, None, (), 0.73)
    assert not easy.reacting_misses()
    assert easy.verdict() == "no: replica-hours vs bound (reacting to the past, both need 1.00x)"
    assert Row("x", 0, 1, ours, 1.17, {}).reacting_misses()  # no reactive schedule met 99% with <= 5% overflow
    assert tally([hard, easy]).splitlines()[4] == (
        "missing the overflow or the bound where no reactive schedule meets both within 1.15x either: 1 of 2 rows "
        "(spiky 4)")


def test_a_sweep_row_takes_the_bound_from_every_schedule_and_the_reacting_figure_from_the_reactive_ones(monkeypatch):
    from floodway.operator.simulator import bound
    from floodway.operator.simulator.run import Options
    from floodway.operator.simulator.sweep import run_one

    # Three flat schedules instead of ~130, on diurnal (one replica carries it): quick.
    monkeypatch.setattr(bound, "schedules", lambda trace, peak, lead_s, rate, first: [
        ("flat 1", bound.Schedule((0.0,), (1,))), (bound.REACTIVE + "flat 2", bound.Schedule((0.0,), (2,))),
        (bound.REACTIVE + "flat 3", bound.Schedule((0.0,), (3,)))])
    row = run_one("diurnal", 0, Options())
    hours = row.ours.replica_hours  # ours holds one replica throughout
    assert row.bound_hours == pytest.approx(hours, rel=0.01)  # flat 1
    assert row.reacting == pytest.approx(2 * row.bound_hours)  # the least of the reactive ones: flat 2
    assert row.reacting_misses()  # twice the bound: reacting to the past could not meet both within 1.15x here
    # Beside ours, ours with the other priority (budget: the gateway caps overflow at the share, in both units).
    o = row.other
    assert o.overflow_share <= 0.04 and o.overflow_token_share <= 0.04
    assert f"| {o.attainment:.2%} / {o.overflow_share:.1%} / {o.overflow_token_share:.1%} / " in render(row)


def test_rows_run_in_worker_processes_come_in_order_and_the_tally_names_the_best_single_reactive_schedule(
        monkeypatch):
    from floodway.operator.simulator import bound
    from floodway.operator.simulator.run import Options
    from floodway.operator.simulator.sweep import rows, tally

    # Two flat schedules instead of ~130 (the workers are forked: they see the patch); one replica carries diurnal.
    monkeypatch.setattr(bound, "schedules", lambda trace, peak, lead_s, rate, first: [
        (bound.REACTIVE + "flat 1", bound.Schedule((0.0,), (1,))),
        (bound.REACTIVE + "flat 2", bound.Schedule((0.0,), (2,)))])
    done = list(rows(Options(), range(2), ("diurnal",), jobs=2))
    assert [(r.scenario, r.seed) for r in done] == [("diurnal", 0), ("diurnal", 1)]
    # flat 2 costs twice the bound (flat 1): past 1.15x, so only flat 1 meets the three targets.
    assert all(r.reactive_meeting == {bound.REACTIVE + "flat 1"} for r in done)
    assert tally(done).splitlines()[5] == ("attainment, overflow and the bound (no baselines): ours on 2 of 2 rows; "
                                           "the best single reactive schedule of the bound's on 2 (flat 1)")
    ours_short = Row("spiky", 0, 100, summary("ours", 0.98, 1.0), 1.0, {})
    assert ours_short.own_misses() == ["attainment 98.00%"]
    assert tally([ours_short]).splitlines()[5] == ("attainment, overflow and the bound (no baselines): ours on 0 of 1 "
                                                   "rows; the best single reactive schedule of the bound's on 0 (none)")


def test_with_classes_a_sweep_row_reports_ours_per_class(monkeypatch):
    from floodway.operator.simulator import bound
    from floodway.operator.simulator.run import Options
    from floodway.operator.simulator.sweep import header, run_one

    monkeypatch.setattr(bound, "schedules", lambda trace, peak, lead_s, rate, first: [
        ("flat 1", bound.Schedule((0.0,), (1,)))])
    opts = Options(classes="interactive=0.5,batch=0.5")
    row = run_one("diurnal", 0, opts)
    assert [c for c, _, _ in row.classes] == ["interactive", "batch"]
    assert all(0.9 < a <= 1.0 and lost == 0 for _, a, lost in row.classes)
    line = render(row)
    assert line.endswith(f" interactive {row.classes[0][1]:.2%}; batch {row.classes[1][1]:.2%} |")
    head, rule = header(opts).splitlines()
    assert head.count("|") == line.count("|") == rule.count("|") and "ours by class" in head
    assert "ours by class" not in header(Options())
