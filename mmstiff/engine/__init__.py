"""Engine pieces: the training diagnostics hooks (imported for registration)."""
from . import hooks  # noqa: F401
