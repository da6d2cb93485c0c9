"""Trace replay under the virtual clock: the replay driver, ``simulate``, ``compare`` and their plots."""
