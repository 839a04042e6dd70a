"""The workers' video: everything that reads, writes or measures a video file, in one package.

* :mod:`~workers.video.ffmpeg`: every ffmpeg command line (decode, encode, the one-process transcode, the
  stitch, the remux, stills), built by pure functions; they run through ``shared.processes`` (``start``, ``run``),
  the one place ffmpeg and ffprobe start, which this module re-exports.
* :mod:`~workers.video.encoders`: what each video encoder is given, and which encoder stands in for which.
* :mod:`~workers.video.codecs`: which hardware encoders and decoders work on this machine (probed at start).
* :mod:`~workers.video.transcode`: a chunk no processor looks at, decoded and encoded in one ffmpeg process.
* :mod:`~workers.video.pipes`: frames through ffmpeg pipes, decoding ahead and encoding behind the processors.
* :mod:`~workers.video.frame_scan`: where each frame of a file sits in time, from its packets;
  :mod:`~workers.video.frame_index`: those times stored at planning and read back by the stitch.
* :mod:`~workers.video.mp4_timing`: a stitched MP4's frames given the input's presentation times.
* :mod:`~workers.video.targets`: jobs' targets fetched once per worker process.
* :mod:`~workers.video.stills`: before/after stills of a finished job.

What a file *is* (``shared.media.probe``: its container, size, rate and streams) stays in ``shared``: the API
probes every upload with it before anything is stored, and the API never imports worker code.
"""
