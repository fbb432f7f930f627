"""Shared-storage mechanics: one study, several workers.

`storage` (a storage URL checked before Optuna opens it, and the one study-folder rule),
`creation` (creating or opening the study exactly once, the defaults and baselines queued),
`heartbeat` (workers' heartbeats, a dead worker's trial queued again, the order each worker
keeps) and `workers` (`tune --gpus`: one worker process per GPU). Optuna's RDB storage is
all the workers share, through its public API.
"""

# The modules code outside this package imports (tests/project/test_surface.py); the
# others are the package's own, private by name (`_x.py`).
__all__ = ["creation", "heartbeat", "storage", "workers"]
