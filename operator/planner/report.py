"""A plan (the dict from plan.make_plan) as a human-readable table."""

from floodway.operator.planner.units import fmt_bytes


def _decimal(n: float) -> str:
    return f"{n / 1e9:,.2f} GB" if n >= 1e9 else f"{n / 1e6:,.1f} MB"


def _ms(s: float) -> str:
    return f"{s * 1000:,.1f} ms"


def _money(x: float) -> str:
    return f"${x:,.0f}" if x >= 100 else f"${x:,.2f}" if x >= 1 else f"${x:.3g}"


def render_text(plan: dict) -> str:
    m, w, kv = plan["model"], plan["weights"], plan["kv"]
    rows = [
        ("Model", f"{m['name']} ({m['source']}): {m['model_type']}, {m['num_layers']} layers, {m['num_heads']} "
                  f"heads, {m['num_kv_heads']} KV heads, head dim {m['head_dim']}, hidden {m['hidden_size']}, "
                  f"vocab {m['vocab_size']}"),
        ("Parameters", f"{m['params']:,} ({m['params_source']})"),
        ("Weights", f"{w['precision']}: {fmt_bytes(w['bytes'])}"),
        ("  by precision", ", ".join(f"{p} {_decimal(b)}" for p, b in w["by_precision"].items())),
        ("KV cache", f"{kv['dtype']}: {kv['bytes_per_token']:,} bytes/token"),
        ("  per sequence", f"{kv['max_model_len']:,} tokens (maxModelLen): "
                           f"{fmt_bytes(kv['bytes_per_sequence_at_max_model_len'])}; {kv['expected_tokens']:,} "
                           f"tokens (expected): {fmt_bytes(kv['bytes_per_sequence_at_expected'])}"),
    ]
    if plan["gpu"]:
        g, pool = plan["gpu"], plan["pool"]
        extra = "".join(f", {v}" for v in (
            g["bandwidth_bytes_per_s"] and f"{g['bandwidth_bytes_per_s'] / 1e9:,.0f} GB/s",
            g["bf16_flops"] and f"{g['bf16_flops'] / 1e12:,.0f} TFLOP/s bf16") if v)
        rows += [
            ("GPU", f"{g['count']} x {g['name']}: {fmt_bytes(g['memory_bytes'])}{extra}"),
            ("KV pool", f"{fmt_bytes(pool['kv_pool_bytes'])} = budget {fmt_bytes(pool['budget_bytes'])} - weights - "
                        f"overhead {fmt_bytes(pool['overhead_bytes'])}; {pool['kv_pool_tokens']:,} tokens"),
            ("Sequences", f"{pool['max_seqs_at_max_model_len']:,} at maxModelLen, {pool['max_seqs_at_expected']:,} "
                          f"at the expected length (maxNumSeqs {pool['max_num_seqs']})"),
            ("Fit", f"{plan['fit']['level'].upper()}: {plan['fit']['message']}"),
        ]
    if "decode_ceiling_batch1_tokens_per_s" in plan:
        rows.append(("Decode ceiling", f"{plan['decode_ceiling_batch1_tokens_per_s']:,.1f} tokens/s at batch 1 "
                                       "(memory bandwidth / weight bytes)"))
    t = plan["throughput"]
    if t:
        slo = "".join(f"; {name} SLO {'met' if ok else 'MISSED'}" for name, ok in
                      (("TTFT", t["meets_ttft"]), ("TPOT", t["meets_tpot"])) if ok is not None)
        rows += [
            ("Replica", f"from {t['source']}: {t['batch']} concurrent (limited by {t['limited_by']}), step "
                        f"{_ms(t['step_s'])}, TTFT >= {_ms(t['ttft_s'])}, TPOT {_ms(t['tpot_s'])}{slo}"),
            ("  capacity", f"{t['requests_per_s']:,.2f} requests/s, {t['output_tokens_per_s']:,.0f} output tokens/s, "
                           f"prefill {t['prefill_tokens_per_s']:,.0f} tokens/s"),
        ]
        if t["replicas"] is not None:
            gpus = t["gpus_total"]
            rows.append(("Replicas", f"{t['replicas']} for {t['rate']:g} requests/s"
                                     + (f" ({gpus} GPU{'s' if gpus != 1 else ''})" if gpus is not None else "")))
    c = plan["cost"]
    if c:
        rows.append(("Cost", f"{_money(c['self_per_million_tokens'])} per million tokens on a busy replica "
                             f"({_money(c['replica_price_per_hour'])} per replica-hour)"))
        if c["self_per_million_tokens_at_rate"] is not None:
            rows.append(("  at the rate", f"{_money(c['self_per_million_tokens_at_rate'])} per million tokens"))
        rows.append(("  requests", f"{_money(c['self_cost_per_request'] * 1000)} per 1k on a busy replica"
                     + (f", {_money(c['api_cost_per_request'] * 1000)} per 1k on the API"
                        if c["api_cost_per_request"] is not None else "")))
        if c["api_per_million_tokens"] is not None:
            rows.append(("  API", f"{_money(c['api_per_million_tokens'])} per million tokens at this input/output mix"))
        rows.append(("  break-even", c["verdict"]))
    rows += [("Note", n) for n in plan["notes"]]
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)
