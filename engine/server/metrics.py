"""Prometheus metrics with vLLM's names, labels and histogram buckets, on a registry of the app's own.

Engine-wide gauges and counters are read from the engine loop's latest stats snapshot at scrape time;
per-request histograms are observed by the engine loop thread as outputs arrive.
"""

import time

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0]
REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                           120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
FINISH_REASONS = ("stop", "length", "abort")


class _StatsCollector:
    """Engine gauges and cumulative counters, taken from a stats snapshot (None before the model loads)."""

    def __init__(self, get_stats, model_name: str):
        self._get_stats, self._model = get_stats, model_name

    def collect(self):
        s = self._get_stats()
        if s is None:
            return
        gauges = [
            ("vllm:num_requests_running", "Requests in the running batch.", s.num_running),
            ("vllm:num_requests_waiting", "Requests waiting to be scheduled.", s.num_waiting),
            ("vllm:kv_cache_usage_perc", "KV-cache usage: 1 means all blocks are in use.", s.kv_cache_usage),
            ("floodway_kv_free_blocks", "KV-cache blocks free (including cached, evictable ones).", s.num_free_blocks),
            ("floodway_kv_total_blocks", "KV-cache blocks in the pool.", s.num_total_blocks),
            ("floodway_num_prefill_tokens_waiting", "Prompt tokens queued or admitted whose prefill has not run yet.",
             s.num_prefill_tokens_waiting),
            ("floodway_prefill_tokens_per_second", "Prompt tokens per second prefilled while sequences decode, "
             "from measured step times (0 until a prefill has been timed).", s.prefill_tokens_per_s),
        ]
        counters = [
            ("vllm:prompt_tokens", "Prefill tokens processed.", s.prompt_tokens_total),
            ("vllm:generation_tokens", "Generation tokens processed.", s.generation_tokens_total),
            ("vllm:num_preemptions", "Cumulative preemptions.", s.num_preemptions_total),
            ("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", s.prefix_cache_queries_total),
            ("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.", s.prefix_cache_hits_total),
        ]
        if s.spec_accepted_per_pos:  # speculative decoding is on
            counters += [
                ("vllm:spec_decode_num_drafts", "Verifies of at least one draft token.", s.spec_num_drafts),
                ("vllm:spec_decode_num_draft_tokens", "Draft tokens verified.", s.spec_num_draft_tokens),
                ("vllm:spec_decode_num_accepted_tokens", "Draft tokens accepted.", s.spec_num_accepted_tokens),
            ]
        for family, rows in ((GaugeMetricFamily, gauges), (CounterMetricFamily, counters)):
            for name, doc, value in rows:
                metric = family(name, doc, labels=["model_name"])
                metric.add_metric([self._model], value)
                yield metric
        if s.spec_accepted_per_pos:
            metric = CounterMetricFamily("vllm:spec_decode_num_accepted_tokens_per_pos",
                                         "Draft tokens accepted, by position within a verify (0: the first draft).",
                                         labels=["model_name", "position"])
            for pos, value in enumerate(s.spec_accepted_per_pos):
                metric.add_metric([self._model, str(pos)], value)
            yield metric
        yield _cache_config_info(s, self._model)
        if s.max_lora:
            yield _lora_requests_info(s)


def _cache_config_info(s, model: str) -> GaugeMetricFamily:
    """Capacity as labels of a gauge at 1, as vLLM's vllm:cache_config_info (plus its scheduler's batch
    limits): the gateway reads it on its first scrape instead of learning capacity from load."""
    labels = {"model_name": model, "block_size": s.block_size, "num_gpu_blocks": s.num_total_blocks,
              "max_num_seqs": s.max_num_seqs, "max_num_batched_tokens": s.max_num_batched_tokens}
    metric = GaugeMetricFamily("vllm:cache_config_info", "Engine capacity (KV blocks, batch limits) as labels.",
                               labels=list(labels))
    metric.add_metric([str(v) for v in labels.values()], 1.0)
    return metric


def _lora_requests_info(s) -> GaugeMetricFamily:
    """As vLLM's: the adapters of running and of waiting requests (comma-joined) and the slots as labels, the value
    the time of the snapshot, so the newest series is the current one."""
    labels = {"running_lora_adapters": ",".join(s.running_lora_adapters),
              "waiting_lora_adapters": ",".join(s.waiting_lora_adapters), "max_lora": str(s.max_lora)}
    metric = GaugeMetricFamily("vllm:lora_requests_info", "Running stats on LoRA requests.", labels=list(labels))
    metric.add_metric(list(labels.values()), time.time())
    return metric


class ServerMetrics:
    def __init__(self, model_name: str, get_stats):
        disable_created_metrics()  # no *_created series, as vLLM: fewer series for dashboards to skip
        self.model_name = model_name
        self.registry = CollectorRegistry()
        labels = ["model_name"]
        h = dict(labelnames=labels, registry=self.registry)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token.", buckets=TTFT_BUCKETS, **h)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Inter-token latency.", buckets=ITL_BUCKETS, **h)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "End-to-end request latency.",
                             buckets=REQUEST_LATENCY_BUCKETS, **h)
        self.queue = Histogram("vllm:request_queue_time_seconds", "Time from arrival to first scheduling.",
                               buckets=REQUEST_LATENCY_BUCKETS, **h)
        self.success = Counter("vllm:request_success", "Finished requests by finish reason.",
                               labelnames=["model_name", "finished_reason"], registry=self.registry)
        self.rejected = Counter("floodway_admission_rejected", "Requests refused with 429 by admission control.",
                                labelnames=labels, registry=self.registry)
        # Children exist from the start, so every series is scrapeable (as zeros) before the first request.
        for reason in FINISH_REASONS:
            self.success.labels(model_name, reason)
        for metric in (self.ttft, self.itl, self.e2e, self.queue, self.rejected):
            metric.labels(model_name)
        self.registry.register(_StatsCollector(get_stats, model_name))
        self._last_token_time: dict[str, float] = {}  # touched only by the engine loop thread

    def observe(self, out, now: float | None = None) -> None:
        """One RequestOutput from a step (engine loop thread)."""
        now = time.time() if now is None else now
        m, rid = out.metrics, out.request_id
        if out.new_token_ids and out.index == 0:  # n > 1: the first choice stands for the request's latency
            last = self._last_token_time.get(rid)
            if last is None:
                first = m.first_token_time or now
                self.ttft.labels(self.model_name).observe(max(0.0, first - m.arrival_time))
                if m.first_scheduled_time is not None:
                    self.queue.labels(self.model_name).observe(max(0.0, m.first_scheduled_time - m.arrival_time))
            else:
                self.itl.labels(self.model_name).observe(max(0.0, now - last) / len(out.new_token_ids))
            self._last_token_time[rid] = now
        if out.finished:
            self._last_token_time.pop(rid, None)
            end = m.finished_time or now
            self.e2e.labels(self.model_name).observe(max(0.0, end - m.arrival_time))
            self.success.labels(self.model_name, out.finish_reason or "stop").inc()

    def reject(self) -> None:
        self.rejected.labels(self.model_name).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
