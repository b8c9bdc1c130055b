"""The lowest layer: argument checks, state layouts and weights-only checkpoint loading.

Nothing here imports the rest of mmstiff, so every layer may use it (docs/design.md).
"""
from .checks import (check_config, check_indices, check_non_negative_int, check_patterns,
                     check_positive_int, matches_any)

__all__ = [
    'check_config', 'check_indices', 'check_non_negative_int', 'check_patterns',
    'check_positive_int', 'matches_any'
]
