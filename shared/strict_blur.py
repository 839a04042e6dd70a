"""``face_blur``'s strict mode (``face.blur_strict``, the default for ``face_blur``): every number it changes, here.

An anonymiser's worse error is a face left showing, so strict mode trades time and a little over-blurring for
recall. Against a plain tracked job it:

* lowers the tracker's two scores to at most :data:`STRICT_HIGH` (starts a track; ``face.detector_score`` when that
  is lower) and :data:`STRICT_LOW` (continues one; ``face.track_score`` when lower) — a job can lower them further,
  never raise them — and hides every detection at or above the low score, whatever its track says;
* detects on more views of each frame (``workers.faces.sweep``): the frame turned by ±:data:`TURN` degrees, and,
  for frames up to :data:`ZOOM_UP_TO` px on their longer side, enlarged :data:`ZOOM` times;
* grows each box by ``face.blur_margin`` (default :data:`STRICT_MARGIN`) of its size on every side, with a soft
  edge that fades out within the margin.

What they achieve was measured, not tuned for: on the synthetic clip with exact ground truth
(``tests/support/crowd.py``: faces 180 → 28 px, turned up to ±40°, blurred, dark, half-covered) strict mode hid
every face-frame of faces of 32 px and more, and on ``crowd_1080p.mp4`` the nearest face in the frames where
detection at 0.5 misses it (``tests/integration/test_face_tracks.py``). The two scores are ceilings (a job's lower
``face.detector_score`` or ``face.track_score`` wins); the margin is an option.
"""

from __future__ import annotations

__all__ = ["STRICT_HIGH", "STRICT_LOW", "STRICT_MARGIN", "TURN", "ZOOM", "ZOOM_UP_TO"]

STRICT_HIGH = 0.35
"""The highest score that starts a track (a confident face) in strict mode."""

STRICT_LOW = 0.15
"""The highest score that continues a track in strict mode; every detection at or above it is hidden."""

STRICT_MARGIN = 0.2
"""The default ``face.blur_margin``: each side of a box grows by this fraction of its size."""

TURN = 30.0
"""Degrees the frame is turned each way for the extra detection passes (a face turned up to 40° is then within
10–15° of upright in one of them)."""

ZOOM = 2
"""How much a small frame is enlarged for the extra pass that finds small faces."""

ZOOM_UP_TO = 960
"""The longest frame side still enlarged (beyond it, the enlarged frame would take too many tiles; a larger
``face.detector_size`` is the way to small faces there)."""
