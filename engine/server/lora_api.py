"""LoRA in the API, as vLLM serves it: a request names an adapter in `model`; `POST /v1/load_lora_adapter`
{"lora_name", "lora_path"} and `POST /v1/unload_lora_adapter` {"lora_name"} change what is served (200 with a
plain-text line; 404 for a missing folder or an unknown adapter, 400 for anything else); `/v1/models` lists the
adapters with their base model as `parent`. A --lora-modules adapter that failed to load at startup is absent there
and listed with its reason under `failed_lora_adapters` in `/debug/engine`, which the operator reads when a replica
lacks an adapter of its spec."""

import asyncio
import dataclasses

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse
from floodway.engine.server.errors import APIError, bad_request
from floodway.engine.server.responses import ErrorResponse, ModelCard, now_s
from pydantic import BaseModel, ConfigDict


class LoadLoRAAdapterRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lora_name: str
    lora_path: str


class UnloadLoRAAdapterRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lora_name: str
    lora_int_id: int | None = None  # vLLM's optional id; names identify adapters here


def _manager(state):
    return state.engine.lora if state.engine is not None else None


def adapter_for(state, requested: str | None) -> str | None:
    """The adapter a request's `model` names (None: the base model); 404 for a name served neither way."""
    if requested is None or requested == state.served_model:
        return None
    manager = _manager(state)
    if manager is not None and manager.registry.get(requested) is not None:
        return requested
    served = [state.served_model, *(a.name for a in manager.registry.all())] if manager is not None \
        else [state.served_model]
    raise APIError(404, f"The model `{requested}` does not exist; this server serves "
                        f"{', '.join(f'`{m}`' for m in served)}.", param="model", code="model_not_found")


def card(state, name: str) -> ModelCard:
    adapter = _manager(state).registry.get(name) if _manager(state) is not None else None
    if adapter is None:
        raise APIError(404, f"The model `{name}` does not exist.", param="model", code="model_not_found")
    return ModelCard(id=adapter.name, created=now_s(), root=adapter.path, parent=state.served_model,
                     max_model_len=state.engine.max_model_len)


def cards(state) -> list[ModelCard]:
    manager = _manager(state)
    return [] if manager is None else [card(state, a.name) for a in manager.registry.all()]


def failed(state) -> list[dict]:
    """The startup adapters that did not load: [{"name", "path", "reason"}] (empty without LoRA)."""
    manager = _manager(state)
    return [] if manager is None else [dataclasses.asdict(f) for f in list(manager.failed.values())]


def register(app: FastAPI, state) -> None:
    from floodway.engine.lora.peft_format import LoRAError, LoRANotFound
    from floodway.engine.lora.registry import DuplicateAdapter, UnknownAdapter

    def manager():
        state.require_serving()
        m = _manager(state)
        if m is None:
            raise bad_request("LoRA adapters are not enabled on this server: start it with --enable-lora",
                              code="lora_not_enabled")
        return m

    def refused(e: ValueError) -> APIError:
        param = "lora_name" if isinstance(e, (UnknownAdapter, DuplicateAdapter)) or not isinstance(e, LoRAError) \
            else "lora_path"
        if isinstance(e, (LoRANotFound, UnknownAdapter)):
            return APIError(404, str(e), type="not_found_error", param=param, code="lora_not_found")
        return bad_request(str(e), param, code="invalid_lora_adapter")

    errors = {code: {"model": ErrorResponse} for code in (400, 404, 503)}

    @app.post("/v1/load_lora_adapter", response_class=PlainTextResponse, responses=errors)
    async def load_lora_adapter(body: LoadLoRAAdapterRequest):
        m = manager()
        if body.lora_name == state.served_model:
            raise bad_request(f"lora_name '{body.lora_name}' is the base model's name", "lora_name")
        try:  # reads and checks the folder off the event loop
            await asyncio.to_thread(m.load, body.lora_name, body.lora_path)
        except ValueError as e:  # LoRAError, or a bad name
            raise refused(e) from None
        return f"Success: LoRA adapter '{body.lora_name}' added successfully."

    @app.post("/v1/unload_lora_adapter", response_class=PlainTextResponse, responses=errors)
    async def unload_lora_adapter(body: UnloadLoRAAdapterRequest):
        try:
            manager().unload(body.lora_name)
        except LoRAError as e:
            raise refused(e) from None
        return f"Success: LoRA adapter '{body.lora_name}' removed successfully."
