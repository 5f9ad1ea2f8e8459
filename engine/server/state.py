"""The server's state: engine loading in the background, readiness, draining. Routes read it; nothing else."""

import copy
import logging
import threading
from dataclasses import dataclass

from floodway.engine.server.admission import AdmissionPolicy
from floodway.engine.server.errors import APIError

log = logging.getLogger("floodway.engine.server")


@dataclass
class ServerOptions:
    max_waiting_requests: int | None = 256
    max_waiting_tokens: int | None = None
    max_body_bytes: int = 4 * 2**20
    drain_timeout_s: float = 30.0

    def validate(self) -> None:
        for name in ("max_waiting_requests", "max_waiting_tokens"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {v!r}")
        if self.max_body_bytes < 1024:
            raise ValueError(f"max_body_bytes must be >= 1024, got {self.max_body_bytes!r}")
        if self.drain_timeout_s < 0:
            raise ValueError(f"drain_timeout_s must be >= 0, got {self.drain_timeout_s!r}")


class ServerState:
    def __init__(self, engine_config, options: ServerOptions):
        self.engine_config, self.options = engine_config, options
        self.served_model = engine_config.served_model_name or engine_config.model
        self.engine = self.loop = self.frontend = self.tokenizer = self.encoder = self.metrics = None
        self.load_error: str | None = None
        self.draining = False
        self._loaded = threading.Event()

    @property
    def ready(self) -> bool:
        return self._loaded.is_set() and self.load_error is None and not self.draining

    def load(self) -> None:
        """Builds the engine and starts its loop (blocking; the app runs it in a thread at startup)."""
        from floodway.engine.llm_engine import LLMEngine
        from floodway.engine.server.engine_loop import EngineLoop
        from floodway.engine.server.frontend import AsyncEngine
        from floodway.engine.server.metrics import ServerMetrics
        from floodway.engine.server.tokenize import PromptEncoder

        try:
            engine = LLMEngine(self.engine_config)
            # Private tokenizer copies (HF fast tokenizers must not be used from two threads at once): prompts
            # are encoded in the encoder's thread; the event loop's copy decodes single output tokens.
            self.tokenizer = copy.deepcopy(engine.tokenizer)
            self.encoder = PromptEncoder(engine.tokenizer, engine.max_model_len)
            self.served_model = engine.model_name
            self.metrics = ServerMetrics(engine.model_name, lambda: self.loop.stats if self.loop else None)
            self.loop = EngineLoop(engine, self.metrics, self.engine_config.step_delay_ms / 1000)
            self.frontend = AsyncEngine(self.loop, AdmissionPolicy(self.options.max_waiting_requests,
                                                                   self.options.max_waiting_tokens))
            self.engine = engine
            self.loop.start()
            log.info("engine ready: model %s, %d KV blocks", engine.model_name, self.loop.stats.num_total_blocks)
        except Exception as e:  # noqa: BLE001 - reported by /health and /ready, and in the log
            log.exception("engine failed to load")
            self.load_error = f"{type(e).__name__}: {e}"
        finally:
            self._loaded.set()

    def require_serving(self) -> None:
        """Raises the 503 a generation request gets while loading, failed, or draining."""
        if self.draining:
            raise APIError(503, "The server is shutting down and accepts no new requests.",
                           type="service_unavailable", code="draining", headers={"Retry-After": "1"})
        if self.load_error:
            raise APIError(503, f"The model failed to load: {self.load_error}", type="service_unavailable",
                           code="load_failed")
        if not self._loaded.is_set():
            raise APIError(503, "The model is still loading.", type="service_unavailable", code="loading",
                           headers={"Retry-After": "5"})

    def shutdown(self) -> None:
        if self.loop is not None:
            self.loop.stop()
        if self.encoder is not None:
            self.encoder.close()
