"""The command line: ``kafleet worker``, ``kafleet sidecar``, ``kafleet operator`` and the rest.

Owns: parsing the command line (``main.py``), running a worker as a long-lived process with its
signals (``worker.py``) and the live tuning of a running worker from its watched config file
(``live_config.py``).

May import anything of kafleet; nothing of kafleet imports it.
"""
