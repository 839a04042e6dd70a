"""The int8 part of :class:`~workers.engines.torch_engine.TorchEngine`: calibrate on the first items, quantise
(:mod:`workers.engines.quantising`), hold int8 to fp32 with the guard, and fall back to bf16 as a visible
degradation where it fails — or load what a previous process kept.

Import this module only where torch may be imported.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
import warnings
from collections.abc import Sequence

import torch

from shared.settings import CompileMode
from workers.engines.base import EngineStats
from workers.engines.compiling import Compiled, Compiler, compile_module, compile_quantised
from workers.engines.onnx_to_torch import TensorSpec
from workers.engines.quantising import (
    EARLY_ITEMS,
    Batch,
    Int8Plan,
    Verdict,
    convert,
    far_below,
    held_to_fp32,
    prepare,
    quantiser_source,
)

__all__ = ["Int8Steps"]

logger = logging.getLogger("workers.engines.torch_engine")


class Int8Steps:
    """The int8 steps of an engine; the engine holds the state they change."""

    _int8: Int8Plan | None
    _calibration: list[tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]]
    _prepared: torch.nn.Module | None = None  # the fp32 module prepared for quantising, while calibrating
    _module: torch.nn.Module
    _forward: Compiled
    _mode: CompileMode
    _compiler: Compiler
    _device: torch.device
    _inputs: tuple[TensorSpec, ...]
    _seen: set[tuple[int, ...]]
    stats: EngineStats

    def _fall_back(self, error: BaseException) -> None:
        raise NotImplementedError

    def _start_int8(self, plan: Int8Plan) -> None:
        """Use the quantised graph a previous process kept, or its bf16 fallback if int8 failed there; else
        calibrate on the first items (fp32, uncompiled, until then)."""
        verdict = plan.graphs.verdict(plan.key)
        if verdict is not None and not verdict.passed:
            self._to_bf16(f"{verdict.describe()} (measured before, kept in {plan.graphs.folder})")
            return
        graph = plan.graphs.load(plan.key) if verdict is not None else None
        if graph is not None and verdict is not None:
            self.stats.int8, self.stats.guard = "cache", verdict.describe()
            self._use_quantised(graph.to(self._device))
            logger.info("int8 graph loaded from %s (%s)", plan.graphs.folder, verdict.describe())
            return
        logger.info("int8: calibrating on the first %d items (fp32 until then; %s)", plan.items, quantiser_source())

    def _calibrate(self, tensors: Sequence[torch.Tensor], bucket: int) -> tuple[torch.Tensor, ...]:
        """Run the fp32 module prepared for quantising: its outputs are the call's (fp32) and the guard's reference,
        and its observers calibrate on the call; keep the call, and quantise once enough items were seen."""
        assert self._int8 is not None
        if self._prepared is None:
            try:
                self._prepared = prepare(self._module, tuple(tensors), [spec.batched for spec in self._inputs])
            except Exception as error:  # export and PT2E raise plain exceptions of many kinds
                with torch.no_grad():
                    fp32 = tuple(self._module(*tensors))  # this call in fp32; the next ones in bf16
                self._cannot_quantise(error)
                return fp32
        with torch.no_grad():
            outputs: tuple[torch.Tensor, ...] = tuple(self._prepared(*tensors))
        self._calibration.append((tuple(t.clone() for t in tensors), tuple(o.clone() for o in outputs)))
        seen, self.stats.calibrated_items = self.stats.calibrated_items, self.stats.calibrated_items + (bucket or 1)
        if self.stats.calibrated_items >= self._int8.items:
            self._finish_calibration(self._int8)
        elif seen < EARLY_ITEMS <= self.stats.calibrated_items:
            self._check_early(self._int8)
        return outputs

    def _check_early(self, plan: Int8Plan) -> None:
        """Quantise a copy calibrated on the items seen so far and hold it to fp32 on them: where it falls far
        below the bound, int8 has failed — keep the verdict and turn to bf16 now instead of calibrating on."""
        assert self._prepared is not None
        try:
            with warnings.catch_warnings():  # torch's own pytree code, copying the graph's input spec, warns of itself
                warnings.simplefilter("ignore", FutureWarning)
                early = copy.deepcopy(self._prepared)
            verdict = held_to_fp32(convert(early), self._calibration)
        except Exception as error:  # export and PT2E raise plain exceptions of many kinds
            self._cannot_quantise(error)
            return
        if far_below(verdict):
            logger.info("int8: the early check on %d items failed by more than its margin", verdict.items)
            self._calibration.clear()
            self._prepared = None
            self._failed(plan, verdict)

    def _failed(self, plan: Int8Plan, verdict: Verdict) -> None:
        self._to_bf16(self._kept(plan, verdict, None, (), []).describe())

    def _kept(
        self, plan: Int8Plan, verdict: Verdict, graph: torch.nn.Module | None, example: Batch, batched: Sequence[bool]
    ) -> Verdict:
        """The model's verdict, in its stats and stored with the graph that passed it (``None``: it failed)."""
        verdict = dataclasses.replace(verdict, model=plan.model)
        self.stats.guard = verdict.describe()
        plan.graphs.store(plan.key, verdict, graph, example, batched)
        return verdict

    def _finish_calibration(self, plan: Int8Plan) -> None:
        """Quantise, and hold int8 to the fp32 outputs call by call: the verdict is the worst item's, so the first
        call that fails it decides, and the rest are not run."""
        started = time.perf_counter()
        batched = [spec.batched for spec in self._inputs]
        calls, self._calibration = self._calibration, []
        assert self._prepared is not None
        try:
            graph = convert(self._prepared)
            verdict = held_to_fp32(graph, calls)
        except Exception as error:  # export and PT2E raise plain exceptions of many kinds
            self._cannot_quantise(error)
            return
        finally:
            self._prepared = None
        if not verdict.passed:
            self._failed(plan, verdict)
            return
        verdict = self._kept(plan, verdict, graph, calls[0][0], batched)
        self.stats.int8 = "calibrated"
        self._use_quantised(graph)
        logger.info("int8: quantised in %.1fs, %s", time.perf_counter() - started, verdict.describe())

    def _cannot_quantise(self, error: BaseException) -> None:
        self._calibration.clear()
        self._prepared = None
        self._to_bf16(f"it cannot be quantised ({type(error).__name__}: {str(error).splitlines()[0][:300]})")

    def _use_quantised(self, graph: torch.nn.Module) -> None:
        self._module = graph
        self._forward = graph
        if self._mode != "eager":
            try:
                compiler = compile_quantised if self._compiler is compile_module else self._compiler
                self._forward = compiler(graph, self._mode)
            except Exception as error:
                self._fall_back(error)

    def _to_bf16(self, why: str) -> None:
        """int8 failed ``why``: build, compile and run the bf16 module instead, as a visible degradation."""
        assert self._int8 is not None
        self.stats.precision_fallback = f"int8 failed its quality guard or could not be quantised: {why}; runs in bf16"
        logger.warning("precision fallback: %s", self.stats.precision_fallback)
        self._module = self._int8.bf16().to(self._device)
        self._forward = self._module
        self._seen.clear()
        if self._mode != "eager":
            try:
                self._forward = self._compiler(self._module, self._mode)
            except Exception as error:
                self._fall_back(error)
