"""The basics every other package stands on: typed errors, size bounds, atomic file
writing, bounded input files, names from outside checked before they become paths,
redaction of credentials, interrupts, progress, parallel runs and free-space checks.

Layer 0: imports nothing of airgap outside ``airgap.core``.
"""
