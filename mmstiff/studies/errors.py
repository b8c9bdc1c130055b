"""The error every part of the study runner raises for input it cannot run, and the warning for
input it skips (another study's unreadable file)."""
from mmstiff.errors import MmstiffError


class StudyError(ValueError, MmstiffError):
    """A study file the runner cannot run, with the field, the value and what was expected."""


class StudyWarning(UserWarning):
    """Input the runner skips and goes on without (it names the file and what is wrong)."""
