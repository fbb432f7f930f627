"""Shared-storage mechanics: one study, several workers.

`storage` (a storage URL checked before Optuna opens it, and the one study-folder rule),
`creation` (creating or opening the study exactly once, the defaults and baselines queued),
`heartbeat` (workers' heartbeats, a dead worker's trial queued again, the order each worker
keeps) and `workers` (`tune --gpus`: one worker process per GPU). Optuna's RDB storage is
all the workers share, through its public API.
"""
