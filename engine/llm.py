"""Offline API: LLM(model).generate(prompts, params) runs the step engine until every prompt finishes."""

from floodway.engine.config import EngineConfig
from floodway.engine.outputs import RequestOutput, final_choices
from floodway.engine.sampling_params import SamplingParams


class LLM:
    def __init__(self, model: str = "floodway/tiny-llama", **engine_config_kwargs):
        from floodway.engine.llm_engine import LLMEngine

        self.engine = LLMEngine(EngineConfig(model=model, **engine_config_kwargs))
        self.tokenizer = self.engine.tokenizer
        self._counter = 0

    def generate(self, prompts: list[str | list[int]], params: SamplingParams | list[SamplingParams] | None = None,
                 use_tqdm: bool = False, lora: str | None = None) -> list[RequestOutput]:
        """Final outputs in input order: n per prompt (its choices by index; with best_of, the n best); lora: the
        adapter (a --lora-modules name) every prompt runs with."""
        params = params if params is not None else SamplingParams()
        per = params if isinstance(params, list) else [params] * len(prompts)
        if len(per) != len(prompts):
            raise ValueError(f"got {len(per)} SamplingParams for {len(prompts)} prompts")
        ids = []
        for prompt, p in zip(prompts, per, strict=True):
            ids.append(f"gen-{self._counter}")
            self._counter += 1
            self.engine.add_request(ids[-1], prompt, p, lora=lora)
        finals: dict[str, list[RequestOutput]] = {i: [] for i in ids}
        bar = None
        if use_tqdm:
            from tqdm import tqdm

            bar = tqdm(total=len(prompts), desc="generate", unit="req")
        while self.engine.has_unfinished_requests():
            for out in self.engine.step():
                if out.finish_reason is not None:
                    finals[out.request_id].append(out)
                if out.finished and bar is not None:
                    bar.update(1)
        if bar is not None:
            bar.close()
        return [o for i, p in zip(ids, per, strict=True) for o in final_choices(finals[i], p.n)]
