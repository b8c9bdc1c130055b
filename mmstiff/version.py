__version__ = '0.1.0'
version_info = tuple(int(x) for x in __version__.split('.'))
