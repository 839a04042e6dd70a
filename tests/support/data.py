"""Where the reference data (real face models and media, its README) lies: beside the checkout, or where
``SWAPFARM_TEST_DATA`` says (benchmarks/device_kit.sh carries the part the device run reads to a machine that has
no checkout beside it)."""

from __future__ import annotations

import os
from pathlib import Path

DATA = Path(os.environ.get("SWAPFARM_TEST_DATA") or Path(__file__).resolve().parents[3] / "shared" / "data")
