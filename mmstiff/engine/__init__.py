"""Engine pieces: the training diagnostics hooks, the checkpoint and divergence safeguards
(imported for registration), and the search for the checkpoint to resume from."""
from . import hooks  # noqa: F401
from .hooks import DivergenceError, DivergenceHook, SafeCheckpointHook  # noqa: F401
from .resume import ResumeSearch, checkpoint_problem, find_resume_checkpoint  # noqa: F401
