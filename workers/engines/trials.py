"""``auto`` on the CPU, per model: which engine runs it faster here, measured on first use and remembered.

Where ``auto`` would put a model on the compiled torch engine in bf16 (a CPU that computes bf16 natively), that is a
guess from the CPU's capability, measured on the swapper (docs/engines.md); it need not hold for every model, and
its first use pays the compile. So the model is put on trial instead (:class:`TrialEngine`): it starts at once on
ONNX Runtime, with no compile step, while a background thread builds the torch engine and compiles it at the batch
the worker runs; then the job's own calls of that batch alternate between the two engines, timed, :data:`ROUNDS`
each (no work is done only to be measured), and the model stays on the faster. The verdict (:class:`Trial`) is
kept in the compile cache folder (:class:`TrialBook`), keyed by the model file's hash, the CPU, the engines'
versions and the batch, so a restarted worker loads the winner at once and ``swapfarm doctor`` says what was
measured. The torch engine must be faster by :data:`MARGIN` to win: otherwise
ONNX Runtime keeps the model, and later processes never compile it.

A contender in int8 calibrates first: the trial hands it copies of the job's own inputs (those ONNX Runtime is
running) until it has quantised and passed its guard, or failed it and turned to bf16; it is then compiled and
timed in the precision it ended in, and the trial's verdict says what the guard measured.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import hashlib
import json
import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from shared.settings import EngineName, Precision
from workers.engines.base import Engine, EngineStats, Tensor
from workers.engines.cache_files import write_json
from workers.engines.onnx import OnnxEngine

logger = logging.getLogger(__name__)

MARGIN = 1.1
"""How much faster (per item) the compiled torch engine must run than ONNX Runtime to be chosen."""
ROUNDS = 3
"""Timed calls of each engine, alternating; the best of each is its figure."""
CALIBRATION_CALLS = 4
"""The job's calls a calibrating contender may lag behind by (copies of their inputs wait for it; more are not
copied)."""
STOP_SECONDS = 120.0
"""How long a process that is ending waits for a trial's thread to finish the step it is in (see
:func:`stop_trials`)."""


@dataclass(frozen=True)
class Trial:
    """What a model's trial measured on this machine and which engine won.

    Attributes:
        model: the model's registry name.
        engine: the winner.
        precision: the winner's precision.
        seconds: seconds per item of each contender (``"torch bf16"``, ``"onnxruntime fp32"``), best round.
        batch: the batch both ran.
        cpu: the CPU it was measured on, in words.
        measured: when (UTC, ISO 8601).
        note: what the contender's int8 guard measured, where it calibrated (``""`` otherwise).
    """

    model: str
    engine: EngineName
    precision: Precision
    seconds: dict[str, float]
    batch: int
    cpu: str
    measured: str
    note: str = ""

    def describe(self) -> str:
        """In words, e.g. ``measured at batch 8: torch bf16 0.312 s an item, onnxruntime fp32 0.731 s: torch bf16``."""
        figures = ", ".join(f"{label} {seconds:.3g} s an item" for label, seconds in self.seconds.items())
        said = f"measured at batch {self.batch} on {self.measured[:10]}: {figures}: {self.engine} {self.precision}"
        return f"{said} ({self.note})" if self.note else said


class TrialBook:
    """Trials kept in the compile cache folder, one JSON file each, written to a temporary name and renamed (so
    processes sharing the folder never read half of one)."""

    FOLDER = "swapfarm-engine-trials"

    def __init__(self, cache_dir: Path) -> None:
        self.folder = cache_dir.expanduser() / self.FOLDER

    @staticmethod
    def key(model_sha256: str, cpu: str, precision: Precision, batch: int) -> str:
        """The key of a trial: the model file's hash, the CPU, torch's and ONNX Runtime's versions, the precision
        torch ran in and the batch."""
        raw = f"{model_sha256}:{cpu}:{_versions()}:{precision}:{batch}"
        return hashlib.sha256(raw.encode()).hexdigest()[:32]

    def get(self, key: str) -> Trial | None:
        try:
            return Trial(**json.loads((self.folder / f"{key}.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def put(self, key: str, trial: Trial) -> None:
        try:
            write_json(self.folder / f"{key}.json", asdict(trial))
        except OSError as error:
            logger.warning("cannot keep the engine trial of %s in %s: %s", trial.model, self.folder, error)

    def latest(self, model: str, cpu: str) -> Trial | None:
        """The newest trial of ``model`` on this CPU with these engine versions, whatever its file or batch (for
        ``swapfarm doctor``, which does not hash model files)."""
        found: list[Trial] = []
        for path in self.folder.glob("*.json") if self.folder.is_dir() else ():
            trial = self.get(path.stem)
            if trial is not None and trial.model == model and trial.cpu == cpu:
                found.append(trial)
        return max(found, key=lambda trial: trial.measured, default=None)


def _versions() -> str:
    names = ("torch", "onnxruntime", "onnxruntime-openvino", "onnxruntime-gpu")
    return ",".join(f"{name}={_version(name)}" for name in names)


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "-"


class TrialEngine:
    """A model on trial: it runs on ``first`` (ONNX Runtime) while :meth:`start`'s thread builds the ``contender``
    (the torch engine; a string says why it cannot be) and compiles it with one call on ``inputs`` (a batch of
    ``batch``). From then on, calls of ``batch`` items alternate between the two, timed, until each has run
    :data:`ROUNDS` of them (calls of other sizes run on ``first``: the contender would compile another shape in
    them); then every call runs on the winner. ``decided`` is called once with the trial (the loader keeps it in
    the :class:`TrialBook` and logs it). Where the contender wins, ``first``'s session is released, so that a long
    job does not hold both engines' memory.

    A contender that cannot run the model — it says why, raises while built or compiled, or raises in one of the
    timed calls (whose outputs then come from ``first``) — ends the trial on ``first``, with no verdict and
    :attr:`fallback` saying why (the loader reports it as an ``engine_fallback`` degradation)."""

    def __init__(
        self,
        first: OnnxEngine,
        contender: Callable[[], Engine | str],
        *,
        model: str,
        labels: tuple[str, str],
        winners: tuple[tuple[EngineName, Precision], tuple[EngineName, Precision]],
        inputs: Mapping[str, Tensor],
        batch: int,
        cpu: str,
        decided: Callable[[Trial], None],
    ) -> None:
        self._first: OnnxEngine | None = first  # dropped (and its session released) once the contender wins
        self._active: Engine = first
        self._input_names = first.input_names
        self._output_names = first.output_names
        self._contender = contender
        self._model = model
        self._labels = labels
        self._winners = winners
        self._inputs = inputs
        self._batch = batch
        self._cpu = cpu
        self._decided = decided
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._timing: tuple[OnnxEngine, Engine] | None = None  # first and the compiled contender, while timed
        self._times: dict[str, list[float]] = {label: [] for label in labels}
        self._turn = 0
        self._wanted: queue.Queue[dict[str, Tensor]] | None = None  # inputs for a contender calibrating on them
        self._note = ""
        self._thread: threading.Thread | None = None
        self._abandoned = threading.Event()
        self.trial: Trial | None = None
        """The verdict, once measured (``None`` before, and when the torch engine could not run the model)."""
        self.fallback: str | None = None
        """Why the model stays on ONNX Runtime, where the torch engine could not run it (``None`` while it may, and
        where ONNX Runtime was faster)."""

    def start(self) -> threading.Thread:
        self._thread = threading.Thread(target=self._measure, name=f"swapfarm-trial-{self._model}", daemon=True)
        _RUNNING.add(self)
        self._thread.start()
        return self._thread

    def abandon(self, timeout: float | None = None) -> bool:
        """End the trial with no verdict, once its thread has finished the step it is in (a conversion, one
        calibration call, quantising, a compile); wait up to ``timeout`` for that. Whether the thread has ended."""
        self._abandoned.set()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def _go_on(self) -> None:
        if self._abandoned.is_set():
            raise _Abandoned

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the trial to end; whether it has."""
        return self._done.wait(timeout)

    @property
    def active(self) -> Engine:
        """The engine calls run on now."""
        return self._active

    @property
    def input_names(self) -> tuple[str, ...]:
        return self._input_names

    @property
    def output_names(self) -> tuple[str, ...]:
        return self._output_names

    @property
    def stats(self) -> Any:
        """The active engine's counters, if it keeps any (the torch engine does). A contender that failed its int8
        guard and won in bf16 is no precision fallback: int8 was tried, not asked for (the verdict says so)."""
        stats = getattr(self._active, "stats", None)
        if isinstance(stats, EngineStats) and stats.precision_fallback:
            return dataclasses.replace(stats, precision_fallback=None)
        return stats

    def run(self, inputs: Mapping[str, Tensor]) -> list[Tensor]:
        wanted = self._wanted
        if wanted is not None:
            with contextlib.suppress(queue.Full):
                wanted.put_nowait({name: np.array(value, copy=True) for name, value in inputs.items()})
        timing = self._timing
        if timing is None or len(next(iter(inputs.values()))) != self._batch:
            return self._active.run(inputs)
        first, contender = timing
        with self._lock:
            self._turn += 1
            label = self._labels[self._turn % 2]
        if label == self._labels[0]:
            started = time.perf_counter()
            outputs = first.run(inputs)
            self._timed(label, (time.perf_counter() - started) / self._batch, timing)
            return outputs
        started = time.perf_counter()
        try:
            outputs = contender.run(inputs)
        except Exception as error:
            # The job's call is answered by ONNX Runtime; where that raises too, the inputs are at fault, not the
            # contender, and the trial goes on.
            outputs = first.run(inputs)
            logger.exception("model %s: %s failed in a timed call; it stays on %s", self._model, label, self._labels[0])
            self._fall_back(_reason(error), timing)
            return outputs
        self._timed(label, (time.perf_counter() - started) / self._batch, timing)
        return outputs

    def _timed(self, label: str, seconds: float, timing: tuple[OnnxEngine, Engine]) -> None:
        with self._lock:
            if self._timing is not timing:  # another thread's call decided meanwhile
                return
            self._times[label].append(seconds)
            if any(len(times) < ROUNDS for times in self._times.values()):
                return
            self._timing = None
        first, contender = timing
        seconds_per_item = {label: min(times) for label, times in self._times.items()}
        faster = seconds_per_item[self._labels[0]] > MARGIN * seconds_per_item[self._labels[1]]
        engine, precision = self._winners[1] if faster else self._winners[0]
        measured = datetime.now(UTC).isoformat(timespec="seconds")
        self.trial = Trial(
            self._model, engine, precision, seconds_per_item, self._batch, self._cpu, measured, self._note
        )
        if faster:
            self._active = contender
            self._first = None
            first.release()  # calls running on it now finish; its memory goes with the last of them
        logger.info("model %s: %s", self._model, self.trial.describe())
        try:
            self._decided(self.trial)
        finally:
            self._done.set()

    def _fall_back(self, reason: str, timing: tuple[OnnxEngine, Engine] | None = None) -> None:
        """End the trial on ONNX Runtime, with no verdict: the contender cannot run the model."""
        with self._lock:
            if self._timing is not timing:  # another thread's call ended the trial meanwhile
                return
            self._timing = None
        brief = " ".join(reason.split())[:300]
        self.fallback = (
            f"model {self._model}: the torch engine cannot run it ({brief}); ONNX Runtime runs it instead (slower)"
        )
        self._done.set()

    def warmup(self) -> None:
        self._active.warmup()

    def _measure(self) -> None:
        try:
            contender = self._contender()
            self._go_on()
            if isinstance(contender, str):
                logger.warning("model %s stays on %s: %s", self._model, self._labels[0], contender)
                self._fall_back(contender)
                return
            if getattr(contender, "calibrating", False):
                self._calibrate(contender)
            self._as_built(contender)
            self._go_on()
            contender.run(self._inputs)  # compiles the batch the trial times
        except _Abandoned:
            logger.info("model %s: its engine trial was abandoned (the process is ending); no verdict", self._model)
            self._done.set()
            return
        except Exception as error:  # a failed trial leaves the model where it runs; the job goes on
            logger.exception("model %s: its engine trial failed; it stays on %s", self._model, self._labels[0])
            self._fall_back(_reason(error))
            return
        with self._lock:
            if self._first is not None:
                self._timing = (self._first, contender)
        logger.info("model %s: %s is ready; timing it against %s", self._model, self._labels[1], self._labels[0])

    def _calibrate(self, contender: Engine) -> None:
        """Hand an int8 contender the job's own inputs until it has calibrated; then time it as what it became
        (int8, or bf16 where its guard failed)."""
        logger.info("model %s: %s calibrates on the job's inputs", self._model, self._labels[1])
        wanted: queue.Queue[dict[str, Tensor]] = queue.Queue(maxsize=CALIBRATION_CALLS)
        self._wanted = wanted
        try:
            while getattr(contender, "calibrating", False):
                self._go_on()
                try:
                    inputs = wanted.get(timeout=0.25)
                except queue.Empty:
                    continue
                contender.run(inputs)
        finally:
            self._wanted = None  # also where calibrating raised: the trial ends on ONNX Runtime (_measure)

    def _as_built(self, contender: Engine) -> None:
        """Time the contender as what it is now: an int8 one may have calibrated, or loaded a kept graph, or turned
        to bf16 (its guard failed now or in an earlier process); the verdict says which, and what the guard
        measured."""
        stats = getattr(contender, "stats", None)
        precision: Precision = getattr(contender, "precision", self._winners[1][1])
        self._labels = (self._labels[0], f"torch {precision}")
        self._winners = (self._winners[0], ("torch", precision))
        self._times = {label: [] for label in self._labels}
        fallback = getattr(stats, "precision_fallback", None)
        self._note = str(fallback or getattr(stats, "guard", None) or "")


class _Abandoned(Exception):
    """The trial was abandoned: its thread stops at the next step."""


_RUNNING: weakref.WeakSet[TrialEngine] = weakref.WeakSet()


@atexit.register
def stop_trials() -> None:
    """Abandon every trial still running and wait (up to :data:`STOP_SECONDS` each) for its thread to leave torch.

    A trial's thread is a daemon: a process that ends (``swapfarm run`` after its job, a worker shutting down)
    would stop it wherever it is, and one stopped inside a torch call aborts the process (``terminate called
    without an active exception``, exit status 134) after the job has succeeded. Registered to run as the
    process ends, before the interpreter stops its threads."""
    for trial in list(_RUNNING):
        thread = trial._thread
        if thread is None or not thread.is_alive():
            continue
        logger.info("model %s: the process is ending; waiting for its engine trial to stop", trial._model)
        if not trial.abandon(STOP_SECONDS):
            logger.warning("model %s: its engine trial did not stop within %.0f s", trial._model, STOP_SECONDS)


def _reason(error: Exception) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
