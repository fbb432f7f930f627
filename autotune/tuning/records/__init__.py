"""The trial record: what a study stores about each trial and about itself, in one place.

A study database must explain itself, so each trial keeps what it ran and measured in
Optuna's user attributes, and the study keeps its scenario, defaults, reference, workers,
validations and explanations in its own. Those are dictionaries of string keys; read by hand
in many places they drift apart (one reader took a missing `feasible` for true, another for
false). Only the modules here read or write them (`tests/project/test_layers.py` checks it):

`trialrecord` (`TrialRecord`: one trial as one typed value, read by `TrialRecord.of`),
`studyrecord` (`StudyRecord`: the study's own attributes, read once, and their setters),
`writers` (`write`, the study loop's only writer of a trial's record, and what a trial is
queued or added with), `snapshot` (`Snapshot`: a study and every record read once;
`records`; `StudyOrSnapshot`, what readers take), `scalars` (the short copies of key
figures shown by optuna-dashboard), `origin` (`Origin`: why a trial was tried) and
`worker` (`Worker`: the process that ran a trial, and whether it is gone). None of them
imports the loop (`autotune.tuning.study`).
"""
