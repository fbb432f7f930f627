"""Stands in for an import that initialises CUDA (tests/test_warm.py): torch's own
`torch.cuda.is_initialized` then says True, as after a real CUDA call."""

import torch

torch.cuda.is_initialized = lambda: True
