"""Allocation policies (Gavel-style baselines). Each module is a small pure policy; see
:mod:`market.registry` for the names used on the command line."""
