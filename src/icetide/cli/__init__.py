"""The ``icetide`` command line."""
