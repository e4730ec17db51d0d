"""The zoo's Gradio app, started by ``space_app.py``: compare face de-identification methods side by side.

Tabs
* Anonymize: a photo (upload, webcam or a bundled example) through any number of methods at once, each
  with its own controls; per-face identity similarity to the original as measured by a judge model
  (SFace by default), and the time each method took. Below it, a short video through one method
  (:func:`app.video_tab.anonymize_clip`, :func:`zoo.video.anonymize_video`: faces tracked, one key per track,
  audio kept) with a progress bar, a per-track table and the report; the upload is checked as it arrives and
  again before any work (:func:`app.video_tab.read_video_info`: a video container by its content, length,
  frames, frame size).
* Recover: anonymize with a key, then recover with that key and with a wrong one, for every reversible
  method; or recover an anonymized image saved earlier (the real use).
* Diversity: one face, N keys, one row per method, with the mean pairwise identity similarity.

Every result can be downloaded as a zip of PNGs (a video: its MP4) with a JSON report each (the key's fingerprint,
never the key); galleries and zips hold results only, never the uploaded photo (it stays in the input), and
their files are named after what they hold (``anonymized_<method>.png``, ``anonymized_<methods>.zip``, ...).
Methods whose weights are not installed are listed as unavailable; a tab that cannot work here (Recover
without a reversible method) says so and its button is disabled. No key is fixed at start-up: empty key
fields mean a fresh random key per run.

Requests: uploads over ``ZOO_MAX_UPLOAD`` are refused by the server; every photo and video input checks a new upload
at once (never limited by the queue). Events are not held in Gradio's queue: a request's inputs are read and checked
at once (a bad upload is answered in well under a second however busy the app is) and only the methods wait
for one of ``ZOO_CONCURRENCY`` slots (:class:`app.common.HeavySlots`; beyond ``ZOO_QUEUE_SIZE`` waiting, "busy").

Files: Gradio's uploads and cache go to a private folder per process (:func:`app.files.gradio_temp_dir`:
``tempfile.mkdtemp``, mode 0700, inside ``$GRADIO_TEMP_DIR`` or the system temp folder, never the shared
``/tmp/gradio``), whose files are deleted ``ZOO_CACHE_SECONDS`` (default 900) after they were made and the
whole folder at exit. The app's own files go to another private folder (0700; files 0600), one subfolder per
request; a request's files are handed to Gradio's cache (still 0600, in a 0700 folder of their own) and the
request's folder is deleted at once; leftovers (a direct call, a crash) are swept after an hour.

Logging (logger ``space_app``): a user's mistake (no photo, unreadable file, no key, ...) is logged as one line,
without a traceback; an unexpected failure inside a method is logged with its traceback.

Modules
* :mod:`app.main`: the page (:func:`app.main.build_app`) and :func:`app.main.launch`.
* :mod:`app.anonymize_tab`, :mod:`app.video_tab` (the Anonymize tab's short video), :mod:`app.recover_tab`,
  :mod:`app.diversity_tab`: each tab's task and widgets.
* :mod:`app.widgets`: building blocks of the tabs and the wiring of their buttons.
* :mod:`app.methods` (the methods offered, loaded once), :mod:`app.judge` (the identity-similarity column),
  :mod:`app.photos` (photo inputs and examples), :mod:`app.files` (private folders and request files),
  :mod:`app.common` (settings, logger, user errors, the heavy-job slots).
"""
