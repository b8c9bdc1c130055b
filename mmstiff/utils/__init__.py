"""Helpers shared across mmstiff: argument checks, and config preparation for the tools.

The checks are imported eagerly (they need nothing but the standard library); the runtime
helpers load MMEngine's config machinery, so they are imported on first use only, which keeps
``mmstiff.analysis`` free of MMEngine.
"""
from .checks import (check_config, check_indices, check_non_negative_int, check_patterns,
                     check_positive_int, matches_any)

_RUNTIME = ('ConfigError', 'codebase_of', 'init_cpu_distributed', 'load_config',
            'prepare_runner_cfg')

__all__ = ['check_config', 'check_indices', 'check_non_negative_int', 'check_patterns',
           'check_positive_int', 'matches_any', *_RUNTIME]


def __getattr__(name):
    if name in _RUNTIME:
        from . import runtime
        return getattr(runtime, name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
