"""A stand-in for a ``@triton.jit`` kernel of the diagnostics: ``kernel[grid](*args)`` counts the
launch and computes nothing, or fails as Triton's launch does on a machine without a C compiler.
Importable from any test folder (it sits beside the root conftest.py)."""


class StandInKernel:
    """Counts its launches (:attr:`launches`); with ``fails``, each launch raises Triton's
    error for a missing C compiler."""

    def __init__(self, fails=False):
        self.fails = fails
        self.launches = 0

    def __getitem__(self, grid):

        def launch(*args, **kwargs):
            self.launches += 1
            if self.fails:
                raise RuntimeError('Failed to find C compiler. Please specify via CC environment '
                                   'variable.')

        return launch
