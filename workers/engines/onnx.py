"""ONNX Runtime behind the :class:`~workers.engines.base.Engine` protocol.

Sessions are created once per process per model file and provider list, and shared by every engine that loads
the same file while it is kept (:meth:`OnnxEngine.release` forgets one, e.g. once a model on trial runs on the torch
engine instead). Providers are ordered by accelerator family, kept to those this ONNX Runtime build offers, and
may be overridden by ``settings.execution_providers``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shared.errors import ModelError
from shared.families import CPU_PROVIDER, FAMILIES, AcceleratorFamily
from shared.settings import Settings
from workers import degradations
from workers.engines.base import Tensor
from workers.engines.capability import CpuProbe, probe_cpu
from workers.engines.family import detect_family

logger = logging.getLogger(__name__)

PROVIDER_ORDER: Mapping[AcceleratorFamily, tuple[str, ...]] = {name: spec.providers for name, spec in FAMILIES.items()}
"""The providers tried for each family, best first (:attr:`shared.families.FamilySpec.providers`)."""

# ONNX element types as ONNX Runtime names them, and the numpy dtype fed for each.
_DTYPES: Mapping[str, np.dtype[Any]] = {
    "tensor(float)": np.dtype(np.float32),
    "tensor(float16)": np.dtype(np.float16),
    "tensor(double)": np.dtype(np.float64),
    "tensor(int64)": np.dtype(np.int64),
    "tensor(int32)": np.dtype(np.int32),
    "tensor(uint8)": np.dtype(np.uint8),
    "tensor(bool)": np.dtype(np.bool_),
}

# A dimension as ONNX Runtime reports it: a size, a symbolic name, or None.
Dimension = int | str | None


def choose_providers(
    family: AcceleratorFamily, available: Iterable[str], override: Sequence[str] | None = None
) -> tuple[str, ...]:
    """The providers to use, best first: ``override`` if given, else the family's order; either way kept to
    the ``available`` ones. Falling back to the CPU alone is reported (``execution_provider_fallback``).

    Raises:
        ModelError: none of the wanted providers is available.
    """
    offered = set(available)
    wanted = tuple(override) if override else PROVIDER_ORDER[family]
    chosen = tuple(provider for provider in wanted if provider in offered)
    missing = [provider for provider in wanted if provider not in offered]
    if override and missing:
        logger.warning("execution providers %s are not available here; using %s", missing, chosen)
    if not chosen:
        raise ModelError(f"none of the execution providers {list(wanted)} is available (have {sorted(offered)})")
    if chosen == (CPU_PROVIDER,) and wanted != (CPU_PROVIDER,):
        degradations.report(
            "execution_provider_fallback",
            f"ONNX Runtime offers none of {[p for p in wanted if p != CPU_PROVIDER]} here; models run on the CPU",
            sticky=True,
        )
    return chosen


def provider_options(provider: str, settings: Settings, *, cpu: CpuProbe = probe_cpu) -> dict[str, str]:
    """Options for one chosen provider (the one place they are chosen; the worker's log and ``swapfarm doctor``
    show them).

    TensorRT builds an engine per model and input shape: keeping the builds on disk (the folder is made here) pays
    that cost once per machine, not once per process. OpenVINO runs on the CPU device with its inference-precision
    hint: bf16 where ``settings.openvino_precision`` asks for it and the CPU (``cpu()``, the seam tests set) computes
    bf16 natively (AMX or AVX-512 BF16), fp32 otherwise — OpenVINO's own default on such a CPU without AMX, named so
    that a CPU with AMX (where OpenVINO would pick bf16 by itself) stays in fp32 unless asked.
    """
    if provider == "OpenVINOExecutionProvider":
        hint = "bf16" if settings.openvino_precision == "bf16" and cpu().native_bf16 else "f32"
        return {"device_type": "CPU", "load_config": json.dumps({"CPU": {"INFERENCE_PRECISION_HINT": hint}})}
    if provider != "TensorrtExecutionProvider":
        return {}
    cache = settings.model_cache_dir.expanduser() / "tensorrt"
    cache.mkdir(parents=True, exist_ok=True)
    return {"trt_engine_cache_enable": "True", "trt_engine_cache_path": str(cache)}


def describe_options(options: Mapping[str, str]) -> str:
    """One provider's options in a log line or the doctor's report, e.g. ``device_type=CPU, load_config={...}``;
    ``default options`` when there are none."""
    return ", ".join(f"{key}={value}" for key, value in sorted(options.items())) or "default options"


# A session's key: the model file's resolved path, its mtime, the providers with their options, in order, whether
# the model's spatial sizes were freed (:meth:`OnnxEngine.any_size`), and its intra-op threads (0: ONNX Runtime's
# default, one a physical core).
_SessionKey = tuple[str, int, tuple[tuple[str, tuple[tuple[str, str], ...]], ...], bool, int]
_SESSIONS: dict[_SessionKey, Any] = {}  # this process's sessions, shared by the engines of one file and providers
_SESSIONS_LOCK = threading.Lock()


def cached_models() -> list[Path]:
    """The model files this process keeps an ONNX Runtime session of (one entry per provider list), for the next
    engine that loads one to share."""
    with _SESSIONS_LOCK:
        return [Path(key[0]) for key in _SESSIONS]


def release_sessions() -> None:
    """Forget every kept session (see :func:`workers.engines.loading.release_models`)."""
    with _SESSIONS_LOCK:
        _SESSIONS.clear()


def _session(key: _SessionKey) -> Any:
    """The kept session of ``key``, else a new one, kept. Created outside the lock, so that models load in
    parallel; two threads that create the same one at once both get the first kept."""
    with _SESSIONS_LOCK:
        if key in _SESSIONS:
            return _SESSIONS[key]
    session = _new_session(*key)
    with _SESSIONS_LOCK:
        return _SESSIONS.setdefault(key, session)


def _new_session(
    path: str,
    mtime_ns: int,
    providers: tuple[tuple[str, tuple[tuple[str, str], ...]], ...],
    any_size: bool,
    threads: int,
) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # ORT warns about unused initializers (inswapper's emap) on every load
    # Idle intra-op threads sleep instead of spinning: a job runs its stages (decode, detect, swap, encode) on
    # threads of one process, and spinning threads take the cores the other stages need. A 96-frame d18 job ran
    # 1.4-5 % faster so on ONNX Runtime and 2-4 % on the default engine (docs/performance.md).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.intra_op_num_threads = threads
    try:
        return onnxruntime.InferenceSession(
            _any_size(path) if any_size else path,
            sess_options=options,
            providers=[(name, dict(options_of)) for name, options_of in providers],
        )
    except Exception as error:  # ORT raises its own untyped exceptions for unreadable or invalid files
        raise ModelError(f"cannot load model {path}: {error}") from error


def _any_size(path: str) -> bytes:
    """The model at ``path`` with its first input's height and width left free, and no sizes declared for its
    outputs and intermediate values (a fully convolutional model exported at one size computes them from its
    input's)."""
    import onnx

    model = onnx.load(path)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    if len(dims) != 4:
        raise ModelError(f"cannot free the spatial size of {path}: its input is not [N, C, H, W]")
    dims[2].dim_param, dims[3].dim_param = "height", "width"
    for output in model.graph.output:
        output.type.tensor_type.ClearField("shape")
    del model.graph.value_info[:]
    return bytes(model.SerializeToString())


class OnnxEngine:
    """One ONNX model, run by ONNX Runtime.

    Inputs are cast to the dtypes the model declares (so an fp16 model can be fed float32), and checked to be
    exactly the model's inputs.
    """

    def __init__(self, session: Any, *, spatial_size: int | None = None, key: _SessionKey | None = None) -> None:
        self._session = session
        self._key = key  # where the session is kept (load's), for release
        self._spatial_size = spatial_size
        inputs = session.get_inputs()
        self._input_names = tuple(str(node.name) for node in inputs)
        self._output_names = tuple(str(node.name) for node in session.get_outputs())
        self._input_shapes: dict[str, tuple[Dimension, ...]] = {node.name: tuple(node.shape) for node in inputs}
        self._input_dtypes = {node.name: _DTYPES.get(node.type, np.dtype(np.float32)) for node in inputs}
        self._any_size: OnnxEngine | None = None

    @classmethod
    def load(cls, path: Path, settings: Settings, *, spatial_size: int | None = None, threads: int = 0) -> OnnxEngine:
        """An engine for the model file at ``path``, on the providers chosen for this worker.

        ``spatial_size`` fills dynamic dimensions other than the batch for :meth:`warmup` (a detector's
        ``[N, 3, ?, ?]``). ``threads``: the session's intra-op threads (0: ONNX Runtime's default, one a physical
        core); one for a small model its callers run from several threads at once (a detector's tiles).

        Raises:
            ModelError: the file cannot be loaded, or no wanted execution provider is available.
        """
        import onnxruntime

        family = detect_family(settings)
        providers = choose_providers(family, onnxruntime.get_available_providers(), settings.execution_providers)
        resolved = path.resolve()
        try:
            mtime_ns = resolved.stat().st_mtime_ns
        except OSError as error:
            raise ModelError(f"cannot load model {path}: {error}") from error
        keyed = tuple((name, tuple(sorted(provider_options(name, settings).items()))) for name in providers)
        key: _SessionKey = (str(resolved), mtime_ns, keyed, False, threads)
        session = _session(key)
        chosen = dict(keyed)
        active = [
            f"{name} ({describe_options(dict(chosen[name]))})" if chosen.get(name) else name
            for name in session.get_providers()
        ]
        logger.info("model %s on %s (family %s)", path.name, ", ".join(active), family)
        return cls(session, spatial_size=spatial_size, key=key)

    def release(self) -> None:
        """Forget this engine's session in the process's session cache, so that its memory is freed once the
        engines holding it are dropped (this one still runs while held). A later load of the file creates a new
        session."""
        with _SESSIONS_LOCK:
            if self._key is not None and _SESSIONS.get(self._key) is self._session:
                del _SESSIONS[self._key]
        if self._any_size is not None and self._any_size is not self:
            self._any_size.release()

    def any_size(self) -> OnnxEngine:
        """This model with its input's height and width free: one run takes a picture of any size (a fully
        convolutional detector exported at 640 px runs a whole enlarged HD frame at once, where 15 tiles of it took
        1.26 times as long, docs/performance.md). Itself where they are free already; kept as its session is.

        Raises:
            ModelError: the model's first input is not ``[N, C, H, W]``, or the model fails to load so.
        """
        shape = self._input_shapes[self._input_names[0]]
        if len(shape) == 4 and not isinstance(shape[2], int) and not isinstance(shape[3], int):
            return self
        if self._any_size is None:
            if self._key is None:
                raise ModelError("cannot free the spatial size of a model not loaded from a file")
            path, mtime_ns, providers, _, threads = self._key
            key: _SessionKey = (path, mtime_ns, providers, True, threads)
            self._any_size = OnnxEngine(_session(key), spatial_size=self._spatial_size, key=key)
        return self._any_size

    @property
    def input_names(self) -> tuple[str, ...]:
        return self._input_names

    @property
    def output_names(self) -> tuple[str, ...]:
        return self._output_names

    @property
    def providers(self) -> tuple[str, ...]:
        """The providers the session runs on, in priority order."""
        return tuple(self._session.get_providers())

    def input_shape(self, name: str) -> tuple[Dimension, ...]:
        """The declared shape of input ``name``: sizes, or symbolic names/``None`` where dynamic."""
        return self._input_shapes[name]

    def fixed_batch(self, name: str) -> int | None:
        """The batch size input ``name`` is fixed to, or ``None`` if its leading dimension is dynamic."""
        leading = self._input_shapes[name][0] if self._input_shapes[name] else None
        return leading if isinstance(leading, int) else None

    def run(self, inputs: Mapping[str, Tensor]) -> list[Tensor]:
        """Run one batch; outputs in the model's output order.

        Raises:
            ValueError: ``inputs`` does not name exactly the model's inputs.
        """
        if set(inputs) != set(self._input_names):
            raise ValueError(f"model inputs are {list(self._input_names)}, got {sorted(inputs)}")
        feed = {name: np.asarray(value, dtype=self._input_dtypes[name]) for name, value in inputs.items()}
        outputs: list[Tensor] = self._session.run(None, feed)
        return outputs

    def warmup(self) -> None:
        """Run once on zeros of the model's input shapes (batch 1) so the first real batch is not slow."""
        inputs = self.example(1)
        if inputs is None:
            logger.debug("warmup skipped: dynamic input sizes and no spatial_size given")
            return
        self.run(inputs)

    def example(self, batch: int) -> dict[str, Tensor] | None:
        """Zeros of the model's inputs, their dtypes and shapes, with ``batch`` where the batch dimension is
        dynamic; ``None`` where another dimension is dynamic and no ``spatial_size`` was given."""
        shapes = {name: self._concrete(shape, batch) for name, shape in self._input_shapes.items()}
        if any(shape is None for shape in shapes.values()):
            return None
        return {name: np.zeros(shape or (), self._input_dtypes[name]) for name, shape in shapes.items()}

    def _concrete(self, shape: tuple[Dimension, ...], batch: int) -> tuple[int, ...] | None:
        sizes = [
            dim if isinstance(dim, int) else (batch if axis == 0 else self._spatial_size)
            for axis, dim in enumerate(shape)
        ]
        return None if any(size is None for size in sizes) else tuple(size for size in sizes if size is not None)
