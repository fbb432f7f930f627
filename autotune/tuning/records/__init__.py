"""The trial record: what a study stores about each trial and about itself, in one place.

A study database must explain itself, so trials and the study keep what they ran and
measured in Optuna's user attributes: dictionaries of string keys that, read by hand in many
places, drift apart. Only these modules read or write them (`tests/project/test_layers.py`):
`trialrecord` (`TrialRecord.of`), `studyrecord` (`StudyRecord` and its setters), `writers`
(the loop's only writer of a trial's record), `snapshot` (a study with every record read
once), `scalars` (short copies for optuna-dashboard), `origin` (why a trial was tried) and
`worker` (who ran it). None of them imports the loop (`autotune.tuning.study`).
"""
