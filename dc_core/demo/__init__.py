"""Embedded demo workloads (user code as far as profiles are concerned)."""
