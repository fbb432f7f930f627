"""The trial record: what a study stores about each trial and about itself, in one place.

A study database must explain itself, so trials and the study keep what they ran and
measured in Optuna's user attributes: dictionaries of string keys that, read by hand in many
places, drift apart. Only these modules read or write them (`tests/project/test_layers.py`):
`trialrecord` (`TrialRecord.of`), `studyrecord` (`StudyRecord` and its setters), `writers`
(the loop's only writer of a trial's record), `snapshot` (a study with every record read
once), `_scalars` (short copies for optuna-dashboard), `origin` (why a trial was tried),
`worker` (who ran it), `measures` (what it is scored on), `estimate` (the memory model's
prediction), `sameengine` (whether flags would start the engine a trial ran) and `progress`
(a run's progress, made of records). They sit low in `tuning/`'s order (`TUNING_LAYERS` in
`tests/project/test_layers.py`): they import only `quality` below them, and the search
policy, the ranking, the shared study and the loop read them.
"""

# The modules code outside this package imports (tests/project/test_surface.py); the
# others are the package's own, private by name (`_x.py`).
__all__ = ["estimate", "measures", "origin", "progress", "sameengine", "snapshot", "studyrecord",
           "trialrecord", "worker", "writers"]
