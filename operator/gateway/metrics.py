"""The gateway's Prometheus metrics (`floodway_gateway_` prefix) on a registry of its own.

Labels never carry request content or secrets: backend ids (engine URL or pod), `overflow`, `none`, tenant names
(the tenants file's, never its keys), the limit that refused a request, class names.
"""

from __future__ import annotations

from floodway.operator.gateway.overflow import REPLICAS_NEEDED_BUCKETS, OverflowPolicy
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Sub-millisecond resolution: the gateway's own overhead is what this histogram is for.
_ADDED_BUCKETS = (0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
_HOLD_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# One bound at 1 / the default predicted_ttft_factor: where that margin stops covering the prediction's error.
MARGIN_BOUND = round(1 / OverflowPolicy.predicted_ttft_factor, 3)
# With a TTFT SLO, answers predicted at least this share of the overflow threshold (factor x SLO) count: far below
# it, fixed costs such as HTTP and a step's length set the ratio, and nothing was at risk.
WATCHED_SHARE = 0.5
_RATIO_BUCKETS = tuple(sorted({0.5, 0.8, 0.9, 1.0, MARGIN_BOUND, 1.25, 1.5, 2.0, 3.0, 5.0}))


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter(
            "floodway_gateway_requests", "Attempts by backend and outcome (ok, client_error, retried: failed "
            "before the first byte and sent elsewhere, stream_error, rejected: answered 429 by the gateway, "
            "timed_out: a local engine silent for request_timeout_s, answered 504)",
            ["backend", "outcome"], registry=r)
        self.overflow = Counter("floodway_gateway_overflow", "Requests sent to the overflow API, by trigger",
                                ["reason"], registry=r)
        self.request_tokens = Counter(
            "floodway_gateway_request_tokens", "Estimated tokens (prompt plus completion) of the requests that reached "
            "the gateway, counted once each as it arrives: what the overflow budget's token share is of", registry=r)
        self.overflow_tokens = Counter("floodway_gateway_overflow_tokens", "Estimated tokens of the requests sent "
                                       "to the overflow API", registry=r)
        self.overflow_declined = Counter(
            "floodway_gateway_overflow_declined", "Requests a trigger would have sent to the overflow API that stayed "
            "local (or held, with no ready backend) because the overflow share was spent (autoscaling.priority "
            "budget), counted once each", registry=r)
        self.held = Gauge("floodway_gateway_hold_queue_depth", "Requests held in the gateway's queue", registry=r)
        self.in_flight = Gauge("floodway_gateway_in_flight", "Requests in flight per backend", ["backend"],
                               registry=r)
        self.ready_backends = Gauge("floodway_gateway_ready_backends", "Local backends ready", registry=r)
        self.added_latency = Histogram(
            "floodway_gateway_added_latency_seconds", "Gateway time from request received to upstream request "
            "sent (parsing, decision, routing), holds excluded", buckets=_ADDED_BUCKETS, registry=r)
        self.hold_seconds = Histogram("floodway_gateway_hold_seconds", "Time requests spent held",
                                      buckets=_HOLD_BUCKETS, registry=r)
        self.ttft_over_predicted = Histogram(
            "floodway_gateway_ttft_over_predicted", "Streamed local answers with a predicted TTFT (with a TTFT SLO: "
            "predicted at least half the overflow threshold, predicted_ttft_factor x the SLO): time to first "
            "byte over the TTFT the gateway predicted when it sent them. Above 1 / predicted_ttft_factor, a request "
            "kept local within the overflow margin can miss the SLO", buckets=_RATIO_BUCKETS, registry=r)
        self.replicas_needed = Histogram(
            "floodway_gateway_replicas_needed", "Requests by the smallest pool of ready backends that would have "
            "kept their predicted TTFT within the overflow threshold (predicted TTFT x ready backends / "
            "(predicted_ttft_factor x the TTFT SLO)): the share above n is what n backends would have overflowed, "
            "which the autoscaler reads before a scale-down", buckets=REPLICAS_NEEDED_BUCKETS, registry=r)
        self.budget_requests = Gauge("floodway_gateway_overflow_budget_requests_left",
                                     "Overflow requests left in the per-minute budget (-1: unlimited)", registry=r)
        self.budget_tokens = Gauge("floodway_gateway_overflow_budget_tokens_left",
                                   "Overflow tokens left in the per-minute budget (-1: unlimited)", registry=r)
        self.breaker_open = Gauge("floodway_gateway_overflow_breaker_open",
                                  "1 while the overflow API's circuit breaker is open", registry=r)

        self.tenant_requests = Counter("floodway_gateway_tenant_requests", "Requests admitted by the tenant limits, "
                                       "by tenant", ["tenant"], registry=r)
        self.tenant_tokens = Counter("floodway_gateway_tenant_tokens", "Estimated tokens (prompt plus completion) of "
                                     "the requests admitted, by tenant: what its tokens-per-minute limit counts",
                                     ["tenant"], registry=r)
        self.tenant_rejected = Counter(
            "floodway_gateway_tenant_rejected", "Requests answered 429 by a tenant limit, by tenant and limit "
            "(requests_per_minute, tokens_per_minute, concurrent_requests)", ["tenant", "limit"], registry=r)
        self.tenant_overflow = Counter("floodway_gateway_tenant_overflow", "Requests sent to the overflow API, by "
                                       "tenant", ["tenant"], registry=r)
        self.tenant_overflow_capped = Counter(
            "floodway_gateway_tenant_overflow_capped", "Requests that arrived with their tenant's overflow cap "
            "(max_overflow_tokens_per_minute) spent, so could not overflow, by tenant", ["tenant"], registry=r)
        self.tenant_in_flight = Gauge("floodway_gateway_tenant_in_flight", "Admitted requests not yet over (held or "
                                      "answering), by tenant", ["tenant"], registry=r)

        self.class_requests = Counter("floodway_gateway_class_requests", "Requests of each class (spec.classes)",
                                      ["class"], registry=r)
        self.class_overflow = Counter("floodway_gateway_class_overflow", "Requests of each class sent to the overflow "
                                      "API", ["class"], registry=r)
        # SLO attainment (met / measured), over streamed answers: a whole answer's first byte is its last token.
        _measured = ("Streamed answers with a TTFT SLO (their class's ttftMs, else slo.ttftMs) whose first token "
                     "arrived, by {0}: the attainment is floodway_gateway_{0}_ttft_slo_met_total over this")
        _met = ("Streamed answers whose first token came within their TTFT SLO of the request's arrival at the gateway "
                "(holds included), by {0}")
        self.tenant_ttft_measured = Counter("floodway_gateway_tenant_ttft_measured", _measured.format("tenant"),
                                            ["tenant"], registry=r)
        self.tenant_ttft_met = Counter("floodway_gateway_tenant_ttft_slo_met", _met.format("tenant"), ["tenant"],
                                       registry=r)
        self.class_ttft_measured = Counter("floodway_gateway_class_ttft_measured", _measured.format("class"),
                                           ["class"], registry=r)
        self.class_ttft_met = Counter("floodway_gateway_class_ttft_slo_met", _met.format("class"), ["class"],
                                      registry=r)
        _tpot_measured = ("Streamed answers with a TPOT SLO (their class's tpotMs, else slo.tpotMs) that ended whole "
                          "with two events or more, by {0}: the attainment is floodway_gateway_{0}_tpot_slo_met_total "
                          "over this")
        _tpot_met = ("Streamed answers whose mean gap between events after the first (gateway/tpot.py) was within "
                     "their TPOT SLO, by {0}")
        self.tenant_tpot_measured = Counter("floodway_gateway_tenant_tpot_measured", _tpot_measured.format("tenant"),
                                            ["tenant"], registry=r)
        self.tenant_tpot_met = Counter("floodway_gateway_tenant_tpot_slo_met", _tpot_met.format("tenant"),
                                       ["tenant"], registry=r)
        self.class_tpot_measured = Counter("floodway_gateway_class_tpot_measured", _tpot_measured.format("class"),
                                           ["class"], registry=r)
        self.class_tpot_met = Counter("floodway_gateway_class_tpot_slo_met", _tpot_met.format("class"), ["class"],
                                      registry=r)
        self.class_in_flight = Gauge("floodway_gateway_class_in_flight", "Requests of each class not yet over (held, "
                                     "or answering locally or from the overflow API): the autoscaler's demand by "
                                     "class", ["class"], registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
