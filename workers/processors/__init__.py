"""Processors, registered by name. Importing this package registers every built-in processor."""

from workers.processors import (  # noqa: F401  (registers)
    age_modifier,
    background_remover,
    deep_swapper,
    expression_restorer,
    face_blur,
    face_debugger,
    face_editor,
    face_enhancer,
    face_swapper,
    frame_colorizer,
    frame_enhancer,
    lip_syncer,
    passthrough,
)
from workers.processors.base import FrameBatch, Processor, ProcessorContext, Work, build, register, registered

__all__ = ["FrameBatch", "Processor", "ProcessorContext", "Work", "build", "register", "registered"]
