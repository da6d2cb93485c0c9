"""The ``shockwave`` command line: one entry point dispatching to replay and live sub-commands."""
