"""The small files kept beside the compile cache (measured memory, int8 verdicts, engine trials).

Processes sharing the folder may write at once: each file is written to a temporary name and renamed, so no
process reads half of one (the last rename wins; each write is a real measurement). Importing this imports no
torch.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_json(path: Path, value: object, **dump: Any) -> None:
    """Write ``value`` as JSON to ``path`` atomically, making its folder if needed.

    Raises:
        OSError: the folder or the file cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as handle:
        json.dump(value, handle, **dump)
    os.replace(handle.name, path)
