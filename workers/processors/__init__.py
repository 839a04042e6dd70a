"""Processors, registered by name. Importing this package registers every built-in processor."""

from workers.processors import passthrough  # noqa: F401  (registers)
from workers.processors.base import FrameBatch, Processor, ProcessorContext, build, register, registered

__all__ = ["FrameBatch", "Processor", "ProcessorContext", "build", "register", "registered"]
