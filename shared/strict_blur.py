"""``face_blur``'s strict mode (``face.blur_strict``, the default for ``face_blur``): every number it changes, here.

An anonymiser's worse error is a face left showing, so strict mode trades time and a little over-blurring for
recall. Against a plain tracked job it:

* lowers the tracker's two scores to at most :data:`STRICT_HIGH` (starts a track; ``face.detector_score`` when that
  is lower) and :data:`STRICT_LOW` (continues one; ``face.track_score`` when lower) — a job can lower them further,
  never raise them — and hides every detection at or above the low score, whatever its track says;
* detects on more views of each frame (``workers.faces.sweep``): besides the whole frame shrunk into the model's
  input, the frame in tiles at the scale where the smallest face the job promises to hide (``face.blur_min_face``,
  default :data:`MIN_FACE` px at the source resolution) is :data:`RELIABLE_FACE` px for the detector (enlarged
  where that is more than the source), and the frame turned by ±:data:`TURN` degrees, tiled at the scale for faces
  of :data:`TURN_MIN_FACE_FACTOR` times that size, and the frame's four edges mirrored outward (a strip
  :data:`EDGE_DEPTH` smallest faces deep beside its mirror image, enlarged so that face is :data:`EDGE_FACE` px: a
  face mostly outside the frame is whole again there); a second detector (``face.strict_second_detector``) runs on
  the same upright tiles;
* looks closely, in every frame, where each track expects its face (the box carried on by its motion, enlarged so
  the face is :data:`AROUND_FACE` px, upright and turned both ways, packed with the other tracks' as cells of one
  mosaic the size of the detector's input), and, once a new track's motion is known, at up to :data:`LOOK_BACK`
  frames before its first detection where that motion puts it; joins a detection no track's box overlaps to the
  nearest track within :data:`STRICT_REACH` face sizes (a small fast face moves further than its size between frames),
  and looks closely at the frames between a new track's first detection and a track lost up to :data:`BRIDGE_GAP`
  frames before it, within :data:`BRIDGE_REACH` face sizes a frame, where a face moving from one to the other would be;
* shares its extra passes out over ``face.blur_scan_period`` frames (default :data:`SCAN_PERIOD`), except on a frame
  that starts a scene and on the video's last frames (:data:`LAST_FRAMES` periods), which run them all;
* cuts its tracks at scene cuts (consecutive frames whose small grey thumbnails correlate below
  :data:`CUT_CORRELATION`: no box moves or fills across a cut), and carries a track's box on by its motion over its
  last :data:`COAST_BASE` detections for up to ``face.track_gap`` frames after its last detection (a face lost stays
  hidden), and for up to :data:`EDGE_COAST` frames while its box still reaches into the frame where it was last seen
  at the frame's edge moving out, found confidently not long before (a face leaving the frame stays hidden until it
  has left); a box carried on either way may grow, never shrink;
* drops a doubtful face taller than :data:`DOUBTFUL_MOST` of the frame (the shrunk whole frame's false alarms), and
  keeps the second detector's faces only where the job's detector found none, at :data:`SECOND_SCORE` or more;
* grows each box by ``face.blur_margin`` (default :data:`STRICT_MARGIN`) of its size on every side, with a soft
  edge that fades out within the margin.

What they achieve was measured, not tuned for: on the synthetic clip with exact ground truth
(``tests/support/crowd.py``: faces 180 → 28 px, turned up to ±40°, blurred, dark, half-covered) strict mode hid
every face-frame of faces of 32 px and more, and on ``crowd_1080p.mp4`` the nearest face in the frames where
detection at 0.5 misses it (``tests/integration/test_face_tracks.py``). The two scores are ceilings (a job's lower
``face.detector_score`` or ``face.track_score`` wins); the margin is an option.
"""

from __future__ import annotations

__all__ = [
    "AROUND_CELL",
    "AROUND_FACE",
    "AROUND_MOST",
    "AROUND_NEW_IOU",
    "AROUND_SCORE",
    "CONFIRM_BELOW",
    "CONFIRM_FROM",
    "CONFIRM_IOU",
    "CONFIRM_MOST",
    "BRIDGE_GAP",
    "BRIDGE_REACH",
    "COAST_BASE",
    "CUT_CORRELATION",
    "DOUBTFUL_MOST",
    "DOUBTS_MOST",
    "DOUBT_FLOOR",
    "EDGE_COAST",
    "EDGE_DEPTH",
    "EDGE_FACE",
    "EDGE_SCORE",
    "LAST_FRAMES",
    "LOOK_BACK",
    "MIN_FACE",
    "RELIABLE_FACE",
    "SCAN_PERIOD",
    "SECOND_MIN_FACE",
    "SECOND_SCORE",
    "STRICT_HIGH",
    "STRICT_LOW",
    "STRICT_MARGIN",
    "STRICT_REACH",
    "TURN",
    "TURN_MIN_FACE_FACTOR",
    "ZOOM",
    "ZOOM_UP_TO",
]

STRICT_HIGH = 0.35
"""The highest score that starts a track (a confident face) in strict mode."""

STRICT_LOW = 0.15
"""The highest score that continues a track in strict mode; every detection at or above it is hidden."""

STRICT_REACH = 3.0
"""A detection no track's box overlaps joins the nearest track expecting a face of about its size within this many
face sizes (centre to centre): on the 1080p test clips a 27-px face moved 64 px a frame, and started a new track in
every frame."""

BRIDGE_GAP = 2
"""A new track's first detection is bridged to the nearest track whose last detection is up to this many frames
before it, within :data:`BRIDGE_REACH` face sizes for each frame apart: the frames between are looked at closely
where a face moving in a line between the two would be (a small fast face that the passes share out over two frames
find on alternate frames only starts a new track at each detection, too far from the last to join it)."""

BRIDGE_REACH = 4.0
"""Face sizes (the smaller face's) a frame within which a new track is bridged to a lost one (:data:`BRIDGE_GAP`):
more than :data:`STRICT_REACH`, as nothing is joined, only looked for where the face would be between; on the 1080p
benchmark clip of seed 44 a 38-px face moved 128 px (3.4 sizes) a frame, found on alternate frames."""

STRICT_MARGIN = 0.2
"""The default ``face.blur_margin``: each side of a box grows by this fraction of its size."""

TURN = 30.0
"""Degrees the frame is turned each way for the extra detection passes (a face turned up to 40° is then within
10–15° of upright in one of them)."""

MIN_FACE = 24
"""The default ``face.blur_min_face``: the smallest face (box height, px at the source resolution) strict mode's
detection is scaled for."""

RELIABLE_FACE = 32
"""The face height (px, in the detector's input) from which YuNet finds most upright faces: of 14 faces cut from the
reference images and pasted on a texture, at score 0.15, YuNet found 2 at 16 px, 6 at 20, 8 at 24, 9 at 28 and 12
at 32 (SCRFD-500M: 4, 10, 12, 13, 14); turned 35°, both found about half at 32 px (2026-12-01)."""

TURN_MIN_FACE_FACTOR = 2.0
"""The turned passes are tiled for faces this many times ``face.blur_min_face`` (each turned pass over a whole HD
frame at the upright passes' scale would take 2–3 times their tiles)."""

AROUND_FACE = 56
"""The face height (px) a tracked face's neighbourhood is scaled to when it is looked at closely (the checks around
the tracks' predicted boxes): well above :data:`RELIABLE_FACE`, with room in its cell for the face to have moved."""

AROUND_CELL = 160
"""The side (px) of one cell of the mosaic those checks are packed into (a 640-px input holds 16)."""

AROUND_SCORE = 0.35
"""The least score of a face found by looking closely (enlarged, a face scores high: 0.8 on the 1080p test clips'
27-px faces); lower, what a close look finds on background texture would keep a lost track going by itself."""

COAST_BASE = 4
"""A box carried on past a track's detections moves by the track's motion over its last (or first) this many
detections, not its last step: a face half out of the frame's edge jitters from one detection to the next (on the
720p benchmark clip of seed 16, the last step said 8 px a frame down where the face moved 6, and the box carried on
slid off the face; 9 frames of it showed in a row). A box carried on after the last detection may grow with its
face, never shrink: the boxes of the part of a face still in the frame are smaller than the face (with the second
detector on that clip, the box shrank off the face and 6 frames showed in a row)."""

DOUBTFUL_MOST = 0.5
"""A face the sweep finds under :data:`STRICT_HIGH` that is taller than this fraction of the frame's height is
dropped: the whole frame shrunk into the detector's input gives false faces as large as the frame at 0.15–0.27 (on
the 1080p benchmark clip of seed 15, boxes 775–1028 px tall that, carried on by their tracks, blurred 34 % of the
background over the clip and up to 85 % of a frame). A real face that large scores high, and where it did in another
frame, its track fills the frame where it scored low."""

SECOND_SCORE = 0.25
"""The least score of a face the second detector (``face.strict_second_detector``) adds (where the job's detector
found none: its box stands). At the low score, SCRFD's tiles found false faces of 10–15 px, and once a box as large
as the frame, that blurred 64 % and 70 % of the background of two 1080p benchmark clips (5.8 % and 0.9 % with YuNet's
alone). It still finds a 27–31-px face that YuNet scores 0.13 and 0.09 (0.48, 0.49), and a 44-px one that YuNet
misses (0.27)."""

SECOND_MIN_FACE = 0.75
"""The second detector's faces shorter than this fraction of ``face.blur_min_face`` are dropped: its false faces at
0.25 or more on the benchmark clips were 12–15 px tall; a 24-px face's box was 27."""

AROUND_NEW_IOU = 0.1
"""A face a close look finds is added only where it overlaps every face the detection passes found by less than this
IoU: where they found one, their box stands (two boxes of one face that overlap too little for NMS would widen what
is hidden: on the synthetic crowd clip the background changed went from 2.02 % to 2.38 % with both kept)."""

AROUND_MOST = 16
"""The most tracks checked closely in one frame (three cells each: upright and turned both ways)."""

DOUBT_FLOOR = 0.05
"""A face the passes score at least this, below the score that continues a track, and no track expects, is looked at
closely in that frame like a track's box: on the 720p benchmark clip of seed 14 a 24–31-px face back from the edge
scored 0.10 in the passes and 0.70 enlarged, and showed three frames in a row."""

DOUBTS_MOST = 4
"""The most such faces (the highest scored) looked at closely in one frame, after the tracks' boxes."""

CONFIRM_BELOW = 0.5
"""A face the passes found under this score, at least :data:`CONFIRM_FROM` times ``face.blur_min_face`` tall and where
no track expects one, is kept only where a close look (the face shrunk to :data:`AROUND_FACE` px, upright and turned)
finds it again: on a 1080p background plate a dark architectural pattern scored 0.16–0.44 as a 180–220-px face in
most frames (3.08 % of the background blurred) and nothing looked at closely, where real faces of 113–116 px the passes
scored 0.24–0.38 scored 0.84–0.85 so."""

CONFIRM_FROM = 4.0
"""Times ``face.blur_min_face``: the least height of a face :data:`CONFIRM_BELOW` asks to be confirmed (96 px at the
default 24): smaller faces, turned, dark or covered, score low too often to be held to a second look."""

CONFIRM_MOST = 5
"""The most faces confirmed so in one frame (one model run: five boxes, three turns each); the rest are kept."""

CONFIRM_IOU = 0.3
"""The least IoU of the close look's face with the face it confirms."""

SCAN_PERIOD = 2
"""The default ``face.blur_scan_period``: the frames the extra passes (tiles, turned frames, edges) are shared out
over (a frame that starts a scene, the video's first or a cut, runs them all). On the benchmark clips (720p and
1080p, seeds 11 and 12, 904 face-frames) 2 hid 99.56 %, as 1 did, in 0.65–0.75 of the time a frame (2026-12-05)."""

LAST_FRAMES = 2
"""The video's last ``LAST_FRAMES × face.blur_scan_period`` frames run every extra pass, as a frame that starts a scene
does: a face the shared-out passes find on alternate frames is covered in the frames between by its track's look-back
from its next detections, and after the video's last frame there are none. On the 720p benchmark clip of seed 41 a
29–35-px face coming in at the bottom edge in the last three frames showed in all three (2026-12-07)."""

CUT_CORRELATION = 0.5
"""Consecutive frames whose 32×18 grey thumbnails (blurred, each normalised by its own mean and spread, so a frame
darkened or brightened is no cut) correlate below this are a scene cut."""

LOOK_BACK = 10
"""The most frames before a new track's first detection that strict mode looks at closely where the track's motion
puts its face, stopping at the first where no face is (``face.track_gap`` before, the frames the tracker held): on
the 720p benchmark clip of seed 32 a face turned 20–36°, 36–38 px, first found in frame 8, showed in frames 0–3.
Frames are handed back this many frames (and two) after they are fed, not ``face.track_gap`` and one: a 1080p
frame is 6 MB, so a chunk's worker holds about 70 MB of frames more."""

EDGE_COAST = 30
"""A lost track whose last box reached the frame's edge, its side there moving out across it over its last
:data:`COAST_BASE` detections (or its opposite side moving towards it by more than a twentieth of the box: the part
of the face still in the frame shrinking), is carried on by its motion for up to this many frames while its box
still reaches into the frame (``face.track_gap`` frames elsewhere): on the 720p benchmark clip of seed 13 a 97-px
face sank out of the frame at 2 px a frame, and its last third showed for 5 frames after the detector lost it; on
the 1080p clip of seed 22 a face shrinking as it sank showed for 7, its box's bottom rising off the edge. A box
standing at the edge is no face leaving (on the 720p clip of seed 13, a confident box the size of two faces stood
there 20 frames and blurred 10–13 % of the background of each: docs/anonymiser.md)."""

EDGE_DEPTH = 2.0
"""The depth of the strip along each edge of the frame that the edge pass mirrors outward (``workers.faces.edges``),
in ``face.blur_min_face``s: a face of up to about three times that size with half of it or less in the frame."""

EDGE_FACE = 48
"""The height (px, in the detector's input) a face of ``face.blur_min_face`` is enlarged to in the edge pass. On the
720p benchmark clip of seed 34 a 33–38-px face with its upper half in the frame for all 40 frames, found by no other
pass, scored 0.38–0.75 with YuNet in 27 of its 30 frames at 48 px (0.22–0.65, 22 frames at 0.35 or more, at 40 px);
over seeds 31–34 at 720p and 1080p, strict mode hid 99.28 % of the face-frames at 48 px, 99.22 % at 40 px (97.56 %
without the edge pass), in 6 model runs a 720p frame and 10 a 1080p one as 640-px canvases (5 and 6 at 40 px),
shared out over ``face.blur_scan_period`` frames (2026-12-06); 2 runs a frame, the strips whole, where the detector
takes a picture of any size (YuNet)."""

EDGE_SCORE = 0.35
"""The least score of a face the edge pass finds: a mirrored strip of plain background gave false faces at 0.15–0.32
on the benchmark's face-free plates (three in 30 frames, 91–102 px), none at this score."""

ZOOM = 2
"""Kept for callers that still name it: strict mode's old fixed enlargement (now :data:`RELIABLE_FACE` /
``face.blur_min_face``)."""

ZOOM_UP_TO = 960
"""Kept for the device path's reason string: the frames the old fixed enlargement applied to."""
