"""The simulator runs on what a cluster runs: the autoscaler's capacity fields derived from an engine profile,
the policy the operator's control loop builds from the spec, and the gateway's overflow rule with its shipped
defaults (simulator/service.py)."""

import dataclasses
import json

import pytest
from floodway.operator.autoscaler.policy import ScalerState, decide
from floodway.operator.autoscaler.signals import EngineSample, GatewaySample, Scrape, signals_between
from floodway.operator.controller.loop import first_state, step
from floodway.operator.controller.scaling import autoscaler_policy, instant_signals
from floodway.operator.gateway.config import GatewayConfig
from floodway.operator.gateway.overflow import OverflowPolicy
from floodway.operator.render.gateway import gateway_config
from floodway.operator.simulator.replica import ReplicaProfile
from floodway.operator.simulator.run import Options, prepare
from floodway.operator.simulator.service import SIMULATED_API, capacity_fields
from floodway.operator.spec import InferenceServiceSpec

# A profile as `floodway bench engine --profile-out` writes it (decode steps per batch size, as strings).
BENCH_PROFILE = {"model": "floodway/llama-150m", "prefill_tokens_per_s": 1000.04, "decode_context_tokens": 256,
                 "decode_step_s": {"1": 0.01, "8": 0.02, "32": 0.05}, "kv_capacity_tokens": 32768,
                 "max_num_seqs": 32, "block_size": 16, "max_num_batched_tokens": 512}


@pytest.mark.parametrize("tpot_s, max_num_seqs, sequences", [
    (0.05, 32, 28),  # 0.02 + 0.03 (b - 8) / 24 <= 0.9 x 0.05: the prefill budget's headroom is left free
    (0.05, 16, 16),  # the engine's batch cap
    (0.2, 32, 32),
    (0.01, 32, 0),  # not even one sequence decodes within the SLO
])
def test_decode_sequences_fit_the_tpot_slo(tpot_s, max_num_seqs, sequences):
    profile = ReplicaProfile(decode_step_s={1: 0.01, 8: 0.02, 32: 0.05}, max_num_seqs=max_num_seqs)
    assert profile.decode_sequences(tpot_s) == sequences


def test_a_profile_becomes_the_spec_fields_and_both_paths_decide_alike(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(BENCH_PROFILE))
    ours = prepare(Options(scenario="spiky", profile=str(path)))[2]
    fields = capacity_fields(ReplicaProfile.from_json(path), 0.05)
    assert fields == {"prefillTokensPerSecond": 1000.0, "decodeSequences": 28}
    assert capacity_fields(ReplicaProfile.from_json(path), 0.01)["decodeSequences"] == 1  # not 0, "unknown"
    # What a user applies after reading those fields off `floodway simulate --profile` (the simulator's bounds; its
    # forecast looks its cold start ahead).
    spec = InferenceServiceSpec.model_validate({
        "model": "m", "replicas": {"min": 1, "max": 8}, "slo": {"ttftMs": 500, "tpotMs": 50},
        "autoscaling": {**fields, "forecastLeadSeconds": 120}, "overflow": SIMULATED_API})
    assert autoscaler_policy(spec) == ours
    assert ours.per_replica == 28  # decode capacity at the TPOT SLO, under the default targetConcurrency (40)
    # 2 requests in flight, but 20k prompt tokens arrived in 5 s: 4k tokens/s is 8 replicas' worth at half of
    # 1000 tokens/s each; counted in requests it is not even one replica's.
    t = (100.0, 105.0)
    scrapes = [Scrape(t[k], {"e0": EngineSample(running=2, prompt_tokens_total=20_000 * k)},
                      GatewaySample(requests_total=10 * k)) for k in range(2)]
    cluster = first_state(1, spec)  # the operator's loop
    for k in range(2):
        s = step(spec, cluster, scrapes[k], t[k])
        cluster = s.state
    simulated = ScalerState(replicas=1)  # the simulator's tick (des.py): the same signals, then decide()
    for k in range(2):
        sig = signals_between(scrapes[0], scrapes[1], 0.5, 0.05) if k else instant_signals(scrapes[0])
        d = decide(simulated, sig, ours, t[k])
        simulated = d.state
    assert s.signals.prompt_token_rate == pytest.approx(4000.0)
    assert (s.decision.replicas, s.decision.reason) == (d.replicas, d.reason)
    assert d.replicas == 8 and d.reason.startswith("panic: demand 224.0")


def test_without_a_profile_capacity_a_replica_holds_target_concurrency():
    spec = InferenceServiceSpec.model_validate({"model": "m", "autoscaling": {"targetConcurrency": 12}})
    p = autoscaler_policy(spec)
    assert (p.prefill_tokens_per_second, p.decode_sequences, p.per_replica) == (0, 0, 12)


def test_the_simulated_gateway_overflows_by_the_shipped_rule():
    cfg = prepare(Options(trace="steps:rates=1,step_s=60"))[1]
    user = InferenceServiceSpec.model_validate({
        "model": "m", "overflow": {"enabled": True, "baseURL": "https://api.example.com/v1",
                                   "apiKeySecretRef": {"name": "k", "key": "k"}}})
    shipped = GatewayConfig.model_validate(gateway_config(user, {"static": []}, 8000)).overflow_policy()
    assert dataclasses.replace(cfg.overflow, enabled=True) == shipped
    assert (shipped.max_waiting_per_replica, shipped.predicted_ttft_factor) == \
        (OverflowPolicy.max_waiting_per_replica, OverflowPolicy.predicted_ttft_factor)
    tuned = prepare(Options(trace="steps:rates=1,step_s=60", overflow_max_waiting=2, overflow_ttft_factor=0.6))[1]
    assert (tuned.overflow.max_waiting_per_replica, tuned.overflow.predicted_ttft_factor) == (2, 0.6)
