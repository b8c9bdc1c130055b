"""Engine pieces: hooks and the CPU-friendly runtime helpers (imported for registration)."""
from . import hooks  # noqa: F401
