"""Processors, registered by name. Importing this package registers every built-in processor."""

from workers.processors import (  # noqa: F401  (registers)
    face_blur,
    face_debugger,
    face_enhancer,
    face_swapper,
    frame_enhancer,
    passthrough,
)
from workers.processors.base import FrameBatch, Processor, ProcessorContext, Work, build, register, registered

__all__ = ["FrameBatch", "Processor", "ProcessorContext", "Work", "build", "register", "registered"]
