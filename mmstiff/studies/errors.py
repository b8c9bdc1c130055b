"""The error every part of the study runner raises for input it cannot run."""


class StudyError(ValueError):
    """A study file the runner cannot run, with the field, the value and what was expected."""
