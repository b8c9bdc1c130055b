"""Datasets mmstiff adds, and writers of tiny datasets in the real on-disk formats."""
