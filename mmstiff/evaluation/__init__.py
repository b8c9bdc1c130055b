"""Metrics mmstiff adds (imported for registration)."""
