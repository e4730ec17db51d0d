"""Zoo methods: the shared interface (:mod:`.base`) and one module per method.

Load methods by name through :func:`zoo.load`; the registry imports their modules lazily.
"""

from .base import Control, DeidMethod, DeidResult, FaceRecord, NeuralMethod

__all__ = ["Control", "DeidMethod", "DeidResult", "FaceRecord", "NeuralMethod"]
