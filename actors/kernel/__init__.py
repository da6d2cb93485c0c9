"""The actor kernel: the actor base class, the bus and its transports, the wire messages and logging.

Nothing here knows about scheduling; the domain actors in :mod:`actors` build on it.
"""
